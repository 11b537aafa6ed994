-- Issue 20 item 5: batch execution ('execution.runtime-mode' = 'batch'), over the late fixture's inputs (input/late_*.csv, made by make_input.py from testdata/flink/late/input: 2 % of the rows 10-120 s behind the watermark): every row counts, as in Flink's batch execution, where a streaming run drops the late ones; a GROUP BY without a window writes each key's final row, to any sink. Flink's batch execution refuses SESSION windows and event-time temporal joins, so they are not here.
SET 'execution.runtime-mode' = 'batch';
CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/late_impressions.csv', 'format' = 'csv');
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/late_clicks.csv', 'format' = 'csv');
CREATE TABLE events (`key` STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/late_events.csv', 'format' = 'csv');
CREATE TABLE b_attributed (click_id BIGINT, impression_id BIGINT, ad_id BIGINT, impression_ts BIGINT, click_ts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/b_attributed', 'format' = 'csv');
CREATE TABLE b_counts (`key` STRING, window_start TIMESTAMP(3), cnt BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/b_counts', 'format' = 'csv');
CREATE TABLE b_hop (`key` STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/b_hop', 'format' = 'csv');
CREATE TABLE b_recent (impression_id BIGINT, ad_id BIGINT, in_last_three BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/b_recent', 'format' = 'csv');
CREATE TABLE b_first_click (ad_id BIGINT, click_id BIGINT, ts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/b_first_click', 'format' = 'csv');
CREATE TABLE b_clicks_per_user (user_id BIGINT, clicks BIGINT, first_ts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/b_clicks_per_user', 'format' = 'csv');
CREATE TABLE b_clicks_per_ad (ad_id BIGINT, clicks BIGINT, last_ts BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/b_clicks_per_ad.db', 'table-name' = 'b_clicks_per_ad');
INSERT INTO b_attributed
SELECT c.click_id, i.impression_id, c.ad_id, i.ts, c.ts
FROM clicks c JOIN impressions i
  ON c.ad_id = i.ad_id AND c.user_id = i.user_id AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;
INSERT INTO b_counts
SELECT `key`, window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
GROUP BY `key`, window_start, window_end;
;
INSERT INTO b_hop
SELECT `key`, window_start, window_end, COUNT(*)
FROM TABLE(HOP(TABLE events, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE))
WHERE `key` <> 'celebrity'
GROUP BY `key`, window_start, window_end;
INSERT INTO b_recent
SELECT impression_id, ad_id,
  COUNT(*) OVER (PARTITION BY ad_id ORDER BY rt ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)
FROM impressions;
INSERT INTO b_first_click
SELECT ad_id, click_id, ts FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY ad_id ORDER BY rt) AS rn FROM clicks
) WHERE rn = 1;
INSERT INTO b_clicks_per_ad
SELECT ad_id, COUNT(*), MAX(ts) FROM clicks GROUP BY ad_id;
INSERT INTO b_clicks_per_user
SELECT user_id, COUNT(*), MIN(ts) FROM clicks GROUP BY user_id;
