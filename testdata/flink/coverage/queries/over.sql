-- Issue 14 item 9: OVER aggregation on the time attribute, RANGE and ROWS, several aggregates
-- over one window. orders.csv has no two rows of a currency at the same time, so ROWS results
-- do not depend on the order peers arrive in; over_all has no PARTITION BY (all rows in one task).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE over_range (order_id BIGINT, currency STRING, ts BIGINT, amount DECIMAL(10, 2),
  total DECIMAL(38, 2), n BIGINT, avg_qty BIGINT, max_amount DECIMAL(10, 2), min_qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_range', 'format' = 'csv');
CREATE TABLE over_rows (order_id BIGINT, currency STRING, ts BIGINT, qty BIGINT,
  total DECIMAL(38, 2), n BIGINT, avg_qty BIGINT, max_amount DECIMAL(10, 2), min_qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_rows', 'format' = 'csv');
INSERT INTO over_range
SELECT order_id, currency, ts, amount,
  SUM(amount) OVER (PARTITION BY currency ORDER BY rt RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW),
  COUNT(*) OVER (PARTITION BY currency ORDER BY rt RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW),
  AVG(qty) OVER (PARTITION BY currency ORDER BY rt RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW),
  MAX(amount) OVER (PARTITION BY currency ORDER BY rt RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW),
  MIN(qty) OVER (PARTITION BY currency ORDER BY rt RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW)
FROM orders;
INSERT INTO over_rows
SELECT order_id, currency, ts, qty,
  SUM(amount) OVER w, COUNT(*) OVER w, AVG(qty) OVER w, MAX(amount) OVER w, MIN(qty) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt ROWS BETWEEN 5 PRECEDING AND CURRENT ROW);
CREATE TABLE over_all (order_id BIGINT, ts BIGINT, total DECIMAL(38, 2), max_qty BIGINT, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_all', 'format' = 'csv');
INSERT INTO over_all
SELECT order_id, ts, SUM(amount) OVER w, MAX(qty) OVER w, COUNT(*) OVER w
FROM orders
WINDOW w AS (ORDER BY rt ROWS BETWEEN 3 PRECEDING AND CURRENT ROW);
