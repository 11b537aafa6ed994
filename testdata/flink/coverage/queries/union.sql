-- UNION ALL (two SELECTs of other types merged, and a union in a view feeding a window, which
-- keeps the time attribute) and UNION (each distinct row once; Flink's are updates, applied here
-- to a SQLite table with a primary key).
SET 'table.exec.state.ttl' = '1 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE extremes (order_id BIGINT, currency STRING, v DECIMAL(21, 2), ts BIGINT, kind STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/extremes', 'format' = 'csv');
INSERT INTO extremes
SELECT order_id, currency, amount, ts, 'amount' FROM orders WHERE amount > 990
UNION ALL
SELECT order_id, currency, qty, ts, 'qty' FROM orders WHERE qty = 20 AND amount < 100
UNION ALL
SELECT order_id, currency, CAST(qty AS INT), ts, 'both' FROM orders WHERE qty = 1 AND amount > 900;
CREATE VIEW big_or_small AS
SELECT currency, amount, rt FROM orders WHERE amount > 900
UNION ALL
SELECT currency, amount, rt FROM orders WHERE amount < 50;
CREATE TABLE big_or_small_windows (window_start TIMESTAMP(3), currency STRING, n BIGINT, total DECIMAL(38, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/big_or_small_windows', 'format' = 'csv');
INSERT INTO big_or_small_windows
SELECT window_start, currency, COUNT(*), SUM(amount)
FROM TABLE(TUMBLE(TABLE big_or_small, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
GROUP BY window_start, window_end, currency;
CREATE TABLE rare_pairs (currency STRING, qty BIGINT, PRIMARY KEY (currency, qty) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/rare_pairs.db', 'table-name' = 'rare_pairs');
INSERT INTO rare_pairs
SELECT currency, qty FROM orders WHERE qty > 18
UNION
SELECT currency, qty FROM orders WHERE qty < 2;
