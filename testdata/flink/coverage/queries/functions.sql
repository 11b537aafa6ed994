-- Issue 14 item 10: Flink's scalar functions that DataFusion lacks, NULLs included.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE events (id BIGINT, tags STRING, kv STRING, js STRING, ds STRING, n INT)
WITH ('connector' = 'filesystem', 'path' = '${input}/events.csv', 'format' = 'csv');
CREATE TABLE fn_times (order_id BIGINT, plus5m TIMESTAMP_LTZ(3), plus_month TIMESTAMP(3),
  plus_qty_s TIMESTAMP_LTZ(3), minus_q TIMESTAMP(3), diff_s INT, diff_m INT, diff_h INT,
  diff_month INT, diff_year INT, diff_ms INT, unixtime STRING, unixtime_fmt STRING,
  parsed TIMESTAMP(3), reformatted STRING, iso STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/fn_times', 'format' = 'csv');
CREATE TABLE fn_text (id BIGINT, tag1 STRING, tag_n STRING, tag_by_code STRING, b STRING,
  kv_all STRING, name STRING, tier STRING, item0 STRING, ok STRING, whole STRING,
  ts_default TIMESTAMP(3), ts_pattern TIMESTAMP(3), ts_date_only TIMESTAMP(3), formatted STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/fn_text', 'format' = 'csv');
INSERT INTO fn_times
SELECT order_id,
  TIMESTAMPADD(MINUTE, 5, rt),
  TIMESTAMPADD(MONTH, 1, CAST(rt AS TIMESTAMP(3))),
  TIMESTAMPADD(SECOND, NULLIF(qty, 7), rt),
  TIMESTAMPADD(QUARTER, -1, CAST(rt AS TIMESTAMP(3))),
  TIMESTAMPDIFF(SECOND, TO_TIMESTAMP_LTZ(1704067200500, 3), rt),
  TIMESTAMPDIFF(MINUTE, rt, TO_TIMESTAMP_LTZ(1704067200000, 3)),
  TIMESTAMPDIFF(HOUR, TIMESTAMPADD(DAY, -CAST(qty AS INT), rt), rt),
  TIMESTAMPDIFF(MONTH, TIMESTAMP '2023-11-30 10:00:00', CAST(rt AS TIMESTAMP(3))),
  TIMESTAMPDIFF(YEAR, CAST(rt AS TIMESTAMP(3)), TIMESTAMP '2020-02-29 00:00:00'),
  TIMESTAMPDIFF(MILLISECOND, rt, TIMESTAMPADD(SECOND, NULLIF(qty, 3), rt)),
  FROM_UNIXTIME(ts / 1000),
  FROM_UNIXTIME(NULLIF(ts / 1000 - 1704067200, 0), 'yyyyMMdd HH:mm:ss'),
  TO_TIMESTAMP(FROM_UNIXTIME(ts / 1000)),
  DATE_FORMAT(FROM_UNIXTIME(ts / 1000), 'yyyy/MM/dd HH'),
  DATE_FORMAT(rt, 'EEE yyyy-MM-dd''T''HH:mm:ss.SSS h a')
FROM orders WHERE order_id % 40 = 0;
INSERT INTO fn_text
SELECT id,
  SPLIT_INDEX(NULLIF(tags, '-'), ',', 1),
  SPLIT_INDEX(NULLIF(tags, '-'), ',', n),
  SPLIT_INDEX(kv, 59, 0),
  REGEXP_EXTRACT(kv, 'b=(\d+)', 1),
  REGEXP_EXTRACT(kv, '^([a-c])=\d+(;([a-c])=\d+)?', n),
  JSON_VALUE(js, '$.user.name'),
  JSON_VALUE(js, '$.user.tier'),
  JSON_VALUE(js, '$.items[0]'),
  JSON_VALUE(js, '$.ok'),
  JSON_VALUE(js, '$.user'),
  TO_TIMESTAMP(NULLIF(ds, '-')),
  TO_TIMESTAMP(NULLIF(ds, '-'), 'yyyy-MM-dd HH:mm:ss'),
  TO_TIMESTAMP(NULLIF(ds, '-'), 'yyyy-MM-dd'),
  DATE_FORMAT(NULLIF(ds, '-'), 'yyyy-MM-dd HH:mm')
FROM events;
CREATE TABLE fn_windows (currency STRING, shown TIMESTAMP(3), max_lag BIGINT, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/fn_windows', 'format' = 'csv');
INSERT INTO fn_windows
SELECT currency, TIMESTAMPADD(SECOND, 1, window_start),
  MAX(CAST(TIMESTAMPDIFF(MILLISECOND, rt, TIMESTAMPADD(MINUTE, 5, rt)) AS BIGINT)) - 300000,
  COUNT(*)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '10' MINUTE))
GROUP BY currency, window_start, window_end;
CREATE TABLE fn_json_returning (id BIGINT, tier INT, ok BOOLEAN, tier_s STRING, missing INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/fn_json_returning', 'format' = 'csv');
INSERT INTO fn_json_returning
SELECT id, JSON_VALUE(js, '$.user.tier' RETURNING INT), JSON_VALUE(js, '$.ok' RETURNING BOOLEAN),
  JSON_VALUE(js, '$.user.tier' RETURNING STRING), JSON_VALUE(js, '$.nope' RETURNING INT)
FROM events;
