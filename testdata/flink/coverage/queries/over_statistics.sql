-- Issue 24 item 9: STDDEV_POP, STDDEV_SAMP, VAR_POP and VAR_SAMP OVER RANGE, ROWS and unbounded
-- frames (Welford's M2 with rows entering and leaving the frame, as Flink 2.3 plans them).
SET 'table.exec.state.ttl' = '1 h';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE over_statistics_range (order_id BIGINT, currency STRING, ts BIGINT,
  var_qty BIGINT, sd_amount DECIMAL(38, 6), var_x DOUBLE, sd_pop_x DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_statistics_range', 'format' = 'csv');
CREATE TABLE over_statistics_rows (order_id BIGINT, currency STRING, ts BIGINT,
  var_qty BIGINT, sd_amount DECIMAL(38, 6), var_x DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_statistics_rows', 'format' = 'csv');
CREATE TABLE over_statistics_unbounded (order_id BIGINT, currency STRING, ts BIGINT,
  var_x DOUBLE, sd_amount DECIMAL(38, 6))
WITH ('connector' = 'filesystem', 'path' = '${output}/over_statistics_unbounded', 'format' = 'csv');
INSERT INTO over_statistics_range
SELECT order_id, currency, ts,
  VAR_POP(qty) OVER w, STDDEV_SAMP(amount) OVER w, VAR_SAMP(CAST(qty AS DOUBLE) / 3) OVER w,
  STDDEV_POP(CAST(amount AS DOUBLE)) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW);
INSERT INTO over_statistics_rows
SELECT order_id, currency, ts,
  VAR_POP(qty) OVER w, STDDEV_SAMP(amount) OVER w, VAR_SAMP(CAST(qty AS DOUBLE) / 3) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt ROWS BETWEEN 3 PRECEDING AND CURRENT ROW);
INSERT INTO over_statistics_unbounded
SELECT order_id, currency, ts,
  VAR_SAMP(CAST(qty AS DOUBLE) / 3) OVER w, STDDEV_POP(amount) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW);
