-- WITH (common table expressions): a named query read by a window table function, one built on
-- another, one used twice (a union of its two uses), a WITH inside a view, and a WITH query
-- whose name hides a table (the view it reads still reads the table).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE with_windows (window_start TIMESTAMP(3), currency STRING, n BIGINT, total DECIMAL(38, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/with_windows', 'format' = 'csv');
INSERT INTO with_windows
WITH big AS (SELECT currency, amount, rt FROM orders WHERE amount > 500),
     big_not_usd AS (SELECT currency, amount, rt FROM big WHERE currency <> 'C1')
SELECT window_start, currency, COUNT(*), SUM(amount)
FROM TABLE(TUMBLE(TABLE big_not_usd, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
GROUP BY window_start, window_end, currency;
CREATE TABLE with_twice (order_id BIGINT, kind STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/with_twice', 'format' = 'csv');
INSERT INTO with_twice
WITH many AS (SELECT order_id, qty FROM orders WHERE qty >= 19)
SELECT order_id, 'nineteen' FROM many WHERE qty = 19
UNION ALL
SELECT order_id, 'twenty' FROM many WHERE qty = 20;
CREATE VIEW cheap AS
WITH c AS (SELECT order_id, amount, currency FROM orders WHERE amount < 30)
SELECT order_id, amount, currency FROM c;
CREATE TABLE with_hiding (order_id BIGINT, amount DECIMAL(10, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/with_hiding', 'format' = 'csv');
INSERT INTO with_hiding
WITH orders AS (SELECT order_id, amount FROM cheap WHERE currency = 'C2')
SELECT order_id, amount FROM orders;
