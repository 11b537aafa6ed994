-- Issue 24 item 12: regular joins of updating inputs, as Flink's: each slot's latest order
-- (a keep-last deduplication) joined with each quantity's latest order and with plain orders,
-- written to upsert tables and aggregated. The state TTL outlasts the input (weir's runs in
-- event time, Flink's in processing time). run_flink.py applies Flink's changelog to a table
-- keyed by the primary key.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE VIEW latest_per_slot AS
SELECT slot, currency, amount, qty
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY slot ORDER BY rt DESC) AS rownum
  FROM (SELECT order_id % 40 AS slot, currency, amount, qty, rt FROM orders)
)
WHERE rownum = 1;
CREATE VIEW latest_per_qty AS
SELECT qty AS q, order_id AS last_order, currency AS last_currency
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY qty ORDER BY rt DESC) AS rownum FROM orders
)
WHERE rownum = 1;
-- Both sides updating: each slot with the latest order of its quantity.
CREATE TABLE slot_and_qty (slot BIGINT, q BIGINT, currency STRING, last_order BIGINT,
  PRIMARY KEY (slot, q) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/slot_and_qty.db', 'table-name' = 'slot_and_qty');
INSERT INTO slot_and_qty
SELECT s.slot, l.q, s.currency, l.last_order
FROM latest_per_slot s JOIN latest_per_qty l ON s.qty = l.q;
-- Aggregated: per currency, the slots whose latest order shares its quantity's currency.
CREATE TABLE agreeing (currency STRING, slots BIGINT, amount DECIMAL(38, 2),
  PRIMARY KEY (currency) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/agreeing.db', 'table-name' = 'agreeing');
INSERT INTO agreeing
SELECT s.currency, COUNT(*), SUM(s.amount)
FROM latest_per_slot s JOIN latest_per_qty l ON s.qty = l.q
WHERE s.currency = l.last_currency
GROUP BY s.currency;
-- One side append-only: big orders per quantity's latest currency, counted.
CREATE TABLE big_by_latest_currency (last_currency STRING, orders BIGINT,
  PRIMARY KEY (last_currency) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/big_by_latest_currency.db', 'table-name' = 'big_by_latest_currency');
INSERT INTO big_by_latest_currency
SELECT l.last_currency, COUNT(*)
FROM orders o JOIN latest_per_qty l ON o.qty = l.q
WHERE o.amount > 900
GROUP BY l.last_currency;
