-- Issue 20: HAVING on a GROUP BY without a window in batch execution, which filters each key's final row (in streaming it is refused: a key whose result stops matching would need its row deleted). Over the late fixture's clicks, as batch.sql.
SET 'execution.runtime-mode' = 'batch';
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/late_clicks.csv', 'format' = 'csv');
CREATE TABLE bh_busy_users (user_id BIGINT, clicks BIGINT, first_ts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/bh_busy_users', 'format' = 'csv');
CREATE TABLE bh_ads (ad_id BIGINT, clicks BIGINT, users BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/bh_ads', 'format' = 'csv');
INSERT INTO bh_busy_users
SELECT user_id, COUNT(*), MIN(ts) FROM clicks GROUP BY user_id HAVING COUNT(*) >= 3;
INSERT INTO bh_ads
SELECT ad_id, COUNT(*), COUNT(DISTINCT user_id) FROM clicks
GROUP BY ad_id HAVING MAX(ts) - MIN(ts) > 60000 AND COUNT(*) > 2;
