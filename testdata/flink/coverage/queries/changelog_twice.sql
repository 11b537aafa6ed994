-- Issue 24 item 12: a GROUP BY over the updates of another GROUP BY, without a state TTL (as
-- Flink: the keys are bounded by the data). How many (currency, qty) keys have each count of
-- orders: a key's new count takes it out of its old count's row, and a count no key has any
-- more is deleted. run_flink.py applies Flink's changelog to a table keyed by the primary key.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE VIEW per_key AS
SELECT currency, qty, COUNT(*) AS n, SUM(amount) AS total, MAX(order_id) AS last_order
FROM orders
GROUP BY currency, qty;
CREATE TABLE histogram (n BIGINT, keys BIGINT, total DECIMAL(38, 2), smallest DECIMAL(38, 2),
  newest BIGINT, PRIMARY KEY (n) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/histogram.db', 'table-name' = 'histogram');
INSERT INTO histogram
SELECT n, COUNT(*), SUM(total), MIN(total), MAX(last_order)
FROM per_key
GROUP BY n;
