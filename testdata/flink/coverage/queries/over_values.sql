-- Issue 24 item 9: FIRST_VALUE, LAST_VALUE and LISTAGG OVER RANGE, ROWS and unbounded frames
-- (NULLs among the values). orders.csv has no two rows of a currency at the same time, so the
-- order within a frame is the event time's, in both engines.
SET 'table.exec.state.ttl' = '1 h';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE over_values_range (order_id BIGINT, currency STRING, ts BIGINT,
  first_id BIGINT, last_big BIGINT, first_big_amount DECIMAL(10, 2), qtys STRING, big_qtys STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_values_range', 'format' = 'csv');
CREATE TABLE over_values_rows (order_id BIGINT, currency STRING, ts BIGINT,
  first_id BIGINT, last_big BIGINT, first_rt TIMESTAMP_LTZ(3), qtys STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_values_rows', 'format' = 'csv');
CREATE TABLE over_values_unbounded (order_id BIGINT, currency STRING, ts BIGINT,
  first_id BIGINT, last_big BIGINT, first_big STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_values_unbounded', 'format' = 'csv');
INSERT INTO over_values_range
SELECT order_id, currency, ts,
  FIRST_VALUE(order_id) OVER w, LAST_VALUE(CASE WHEN qty > 10 THEN order_id END) OVER w,
  FIRST_VALUE(CASE WHEN qty > 15 THEN amount END) OVER w,
  LISTAGG(CAST(qty AS STRING)) OVER w,
  LISTAGG(CASE WHEN qty > 10 THEN CAST(qty AS STRING) END, '|') OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW);
INSERT INTO over_values_rows
SELECT order_id, currency, ts,
  FIRST_VALUE(order_id) OVER w, LAST_VALUE(CASE WHEN qty > 10 THEN order_id END) OVER w,
  FIRST_VALUE(rt) OVER w, LISTAGG(CAST(qty AS STRING), ';') OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt ROWS BETWEEN 3 PRECEDING AND CURRENT ROW);
INSERT INTO over_values_unbounded
SELECT order_id, currency, ts,
  FIRST_VALUE(order_id) OVER w, LAST_VALUE(CASE WHEN qty > 18 THEN order_id END) OVER w,
  FIRST_VALUE(CASE WHEN qty > 19 THEN CAST(order_id AS STRING) END) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW);
