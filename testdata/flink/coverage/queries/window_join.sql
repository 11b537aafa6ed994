-- Issue 14 item 3: window joins in Flink's syntax: two window table functions over the same windows, joined on the key, window_start and window_end (inner, left, full; tumbling, hopping and cumulative), and a window aggregation on each side joined on the window.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE wj_inner (currency STRING, big_order BIGINT, dear_order BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/wj_inner', 'format' = 'csv');
CREATE TABLE wj_left (currency STRING, big_order BIGINT, dear_order BIGINT, window_start TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/wj_left', 'format' = 'csv');
CREATE TABLE wj_full (l_currency STRING, r_currency STRING, big_order BIGINT, dear_order BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/wj_full', 'format' = 'csv');
CREATE TABLE wj_hop (currency STRING, big_order BIGINT, dear_order BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/wj_hop', 'format' = 'csv');
CREATE TABLE wj_cumulate (currency STRING, big_order BIGINT, dear_order BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/wj_cumulate', 'format' = 'csv');
CREATE TABLE wj_aggregates (currency STRING, window_start TIMESTAMP(3), big_orders BIGINT, amount DECIMAL(38, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/wj_aggregates', 'format' = 'csv');
INSERT INTO wj_inner
SELECT L.currency, L.order_id, R.order_id, L.window_start, L.window_end
FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE qty > 15) L
JOIN (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE amount > 900) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end;
INSERT INTO wj_left
SELECT L.currency, L.order_id, R.order_id, L.window_start
FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE qty > 15) L
LEFT JOIN (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE amount > 900) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end;
INSERT INTO wj_full
SELECT L.currency, R.currency, L.order_id, R.order_id,
  COALESCE(L.window_start, R.window_start), COALESCE(L.window_end, R.window_end)
FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE qty > 15) L
FULL JOIN (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) WHERE amount > 900) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end;
INSERT INTO wj_hop
SELECT L.currency, L.order_id, R.order_id, L.window_start, L.window_end
FROM (SELECT * FROM TABLE(HOP(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)) WHERE qty > 18) L
JOIN (SELECT * FROM TABLE(HOP(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)) WHERE amount > 950) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end;
INSERT INTO wj_cumulate
SELECT L.currency, L.order_id, R.order_id, L.window_start, L.window_end
FROM (SELECT * FROM TABLE(CUMULATE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '3' MINUTE)) WHERE qty > 18) L
JOIN (SELECT * FROM TABLE(CUMULATE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '3' MINUTE)) WHERE amount > 950) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end;
INSERT INTO wj_aggregates
SELECT L.currency, L.window_start, L.n, R.amount
FROM (
  SELECT currency, window_start, window_end, COUNT(*) AS n
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE)) WHERE qty > 10
  GROUP BY currency, window_start, window_end
) L
JOIN (
  SELECT currency, window_start, window_end, SUM(amount) AS amount
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE)) WHERE amount > 500
  GROUP BY currency, window_start, window_end
) R
ON L.currency = R.currency AND L.window_start = R.window_start AND L.window_end = R.window_end;
