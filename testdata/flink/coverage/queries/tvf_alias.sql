-- A window table function named with AS (`TABLE(HOP(...)) AS c`): its columns are `c.col`,
-- in WHERE, GROUP BY and the select list, with an aggregation and without one.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE tvf_alias_windows (window_start TIMESTAMP(3), window_end TIMESTAMP(3), currency STRING, n BIGINT, total DECIMAL(38, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/tvf_alias_windows', 'format' = 'csv');
INSERT INTO tvf_alias_windows
SELECT c.window_start, c.window_end, c.currency, COUNT(*), SUM(c.amount)
FROM TABLE(HOP(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '3' MINUTE)) AS c
WHERE c.qty > 5
GROUP BY c.window_start, c.window_end, c.currency;
CREATE TABLE tvf_alias_rows (order_id BIGINT, window_start TIMESTAMP(3), amount DECIMAL(10, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/tvf_alias_rows', 'format' = 'csv');
INSERT INTO tvf_alias_rows
SELECT w.order_id, w.window_start, w.amount
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE)) w
WHERE w.amount > 990;
