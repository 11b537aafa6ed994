-- Issue 14 item 9: OVER aggregation over an unbounded frame: a running aggregate per key,
-- which weir plans with a state TTL (a day: longer than the input, so no key is forgotten).
SET 'table.exec.state.ttl' = '1 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE over_running (order_id BIGINT, currency STRING, ts BIGINT,
  total DECIMAL(38, 2), n BIGINT, avg_amount DECIMAL(38, 6), min_amount DECIMAL(10, 2), max_qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/over_running', 'format' = 'csv');
INSERT INTO over_running
SELECT order_id, currency, ts,
  SUM(amount) OVER w, COUNT(*) OVER w, AVG(amount) OVER w, MIN(amount) OVER w, MAX(qty) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt);
