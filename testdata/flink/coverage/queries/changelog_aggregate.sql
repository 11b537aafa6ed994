-- Issue 24 item 12: a GROUP BY over a keep-last deduplication, a retracting changelog. Each of 40
-- slots (order_id % 40) keeps its latest order; a slot's new order takes the one it replaces
-- back from its currency's aggregates, so a currency whose slots all moved on is deleted. The
-- state TTL outlasts the input (weir's runs in event time, Flink's in processing time).
-- run_flink.py applies Flink's changelog to a table keyed by the primary key.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE VIEW slots AS
SELECT order_id % 40 AS slot, currency, amount, qty, rt FROM orders;
CREATE VIEW latest_per_slot AS
SELECT slot, currency, amount, qty
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY slot ORDER BY rt DESC) AS rownum
  FROM slots
)
WHERE rownum = 1;
CREATE TABLE per_currency (currency STRING, slots BIGINT, amount DECIMAL(38, 2), lowest DECIMAL(10, 2),
  most BIGINT, mean_qty BIGINT, PRIMARY KEY (currency) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/per_currency.db', 'table-name' = 'per_currency');
INSERT INTO per_currency
SELECT currency, COUNT(*), SUM(amount), MIN(amount), MAX(qty), AVG(qty)
FROM latest_per_slot
GROUP BY currency;
CREATE TABLE per_qty (qty BIGINT, slots BIGINT, amount DECIMAL(38, 2), highest DECIMAL(10, 2),
  PRIMARY KEY (qty) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/per_qty.db', 'table-name' = 'per_qty');
INSERT INTO per_qty
SELECT qty, COUNT(*), SUM(amount), MAX(amount)
FROM latest_per_slot
GROUP BY qty;
