-- Conditions in a join's ON besides keys and time bounds (#24 item 8): in an inner interval
-- join and an inner window join (a filter on the joined rows), and on the right side of a LEFT
-- interval join and a LEFT window join (the right rows that may match; left rows without one
-- still come out, with NULLs).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE jc_interval (a_order BIGINT, b_order BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/jc_interval', 'format' = 'csv');
CREATE TABLE jc_interval_left (a_order BIGINT, b_order BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/jc_interval_left', 'format' = 'csv');
CREATE TABLE jc_window (currency STRING, l_order BIGINT, r_order BIGINT, window_start TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/jc_window', 'format' = 'csv');
CREATE TABLE jc_window_left (currency STRING, l_order BIGINT, r_order BIGINT, window_start TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/jc_window_left', 'format' = 'csv');
INSERT INTO jc_interval
SELECT a.order_id, b.order_id
FROM orders a JOIN orders b
ON a.currency = b.currency AND b.rt BETWEEN a.rt AND a.rt + INTERVAL '3' SECOND
  AND a.amount > b.amount AND b.qty + a.qty > 30;
INSERT INTO jc_interval_left
SELECT a.order_id, b.order_id
FROM orders a LEFT JOIN orders b
ON a.currency = b.currency AND b.rt BETWEEN a.rt AND a.rt + INTERVAL '3' SECOND AND b.qty > 17;
INSERT INTO jc_window
SELECT L.currency, L.order_id, R.order_id, L.window_start
FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE qty > 15) L
JOIN (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE amount > 800) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end
  AND L.amount < R.amount AND L.order_id <> R.order_id;
INSERT INTO jc_window_left
SELECT L.currency, L.order_id, R.order_id, L.window_start
FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE qty > 15) L
LEFT JOIN (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE))) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end
  AND R.amount > 950;
