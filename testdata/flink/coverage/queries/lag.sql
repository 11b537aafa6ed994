-- LAG OVER (PARTITION BY k ORDER BY rt): the value of a row 1 or n rows before in the key, in
-- event-time order, with a default where there is none; a change against the row before; and LAG
-- beside OVER aggregates of the same window.
SET 'table.exec.state.ttl' = '1 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE lagged (order_id BIGINT, currency STRING, ts BIGINT, amount DECIMAL(10, 2),
  prev_amount DECIMAL(10, 2), change DECIMAL(11, 2), qty_2_back BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/lagged', 'format' = 'csv');
INSERT INTO lagged
SELECT order_id, currency, ts, amount, LAG(amount) OVER w, amount - LAG(amount) OVER w,
  LAG(qty, 2, CAST(-1 AS BIGINT)) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt);
CREATE TABLE lag_and_sum (order_id BIGINT, currency STRING, prev_qty BIGINT, qty_sum BIGINT, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/lag_and_sum', 'format' = 'csv');
INSERT INTO lag_and_sum
SELECT order_id, currency, LAG(qty) OVER w, SUM(qty) OVER w, COUNT(*) OVER w
FROM orders
WINDOW w AS (PARTITION BY currency ORDER BY rt);
