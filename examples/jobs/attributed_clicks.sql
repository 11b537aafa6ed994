-- Clicks attributed to an impression of the same ad and user at most 10 s earlier, counted per
-- ad in 1-minute windows. Impressions and clicks come from weir's generator, so nothing is
-- needed on the machine:
--
--   weir run examples/jobs/attributed_clicks.sql --var out=weir-demo-out
--   weir explain examples/jobs/attributed_clicks.sql --var out=weir-demo-out

SET 'parallelism.default' = '2';

CREATE TABLE impressions (
  impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'impressions',
        'generator.rows' = '200000', 'generator.splits' = '2', 'generator.late_share' = '0.01');

CREATE TABLE clicks (
  click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'clicks',
        'generator.rows' = '200000', 'generator.splits' = '2', 'generator.late_share' = '0.01');

CREATE TABLE clicks_per_ad (ad_id BIGINT, window_start BIGINT, clicks BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/attributed_clicks_per_ad.csv',
      'format' = 'csv', 'csv.header' = 'true');

CREATE VIEW attributed AS
SELECT c.click_id, c.ad_id, c.rt AS click_time
FROM clicks c JOIN impressions i
  ON c.ad_id = i.ad_id AND c.user_id = i.user_id
 AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;

INSERT INTO clicks_per_ad
SELECT ad_id, UNIX_TIMESTAMP(DATE_FORMAT(window_start, 'yyyy-MM-dd HH:mm:ss')) * 1000, COUNT(*)
FROM TABLE(TUMBLE(TABLE attributed, DESCRIPTOR(click_time), INTERVAL '1' MINUTE))
GROUP BY ad_id, window_start, window_end;
