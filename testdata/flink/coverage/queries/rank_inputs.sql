-- ROW_NUMBER() ranks by the columns of its subquery's FROM, as in SQL: a select-list alias
-- that takes a column's name does not change what PARTITION BY names, a qualified window
-- column is the window's, and an unselected column or an expression may be ranked by.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
-- The first order per quantity (not per currency, which the alias `qty` names).
CREATE TABLE first_per_qty (qty STRING, order_id BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/first_per_qty', 'format' = 'csv');
INSERT INTO first_per_qty
SELECT qty, order_id FROM (
  SELECT currency AS qty, order_id, ROW_NUMBER() OVER (PARTITION BY qty ORDER BY rt) AS rn
  FROM orders
) WHERE rn = 1;
-- The two biggest orders of each ten minutes, the window named through the TVF's alias.
CREATE TABLE biggest_per_window (window_start TIMESTAMP(3), order_id BIGINT, amount DECIMAL(10, 2), rn BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/biggest_per_window', 'format' = 'csv');
INSERT INTO biggest_per_window
SELECT window_start, order_id, amount, rn FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY t.window_start, t.window_end ORDER BY amount DESC) AS rn
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '10' MINUTES)) t
) WHERE rn <= 2;
-- The first order per band of ten quantities, ranked by an expression and a column the
-- subquery does not select.
CREATE TABLE first_per_band (order_id BIGINT, currency STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/first_per_band', 'format' = 'csv');
INSERT INTO first_per_band
SELECT order_id, currency FROM (
  SELECT order_id, currency, ROW_NUMBER() OVER (PARTITION BY qty / 10 ORDER BY rt) AS rn
  FROM orders
) WHERE rn = 1;
