-- Issue 24 item 12: outer joins of updating inputs, as Flink's: a row without a match comes
-- with NULLs and is taken back when its first match comes (and comes again when its last
-- match goes). Each slot's latest order joined with each quantity's latest big order, counted
-- per currency. The state TTL outlasts the input (weir's runs in event time, Flink's in
-- processing time). run_flink.py applies Flink's changelog to a table keyed by the primary key.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE VIEW latest_per_slot AS
SELECT slot, currency, qty
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY slot ORDER BY rt DESC) AS rownum
  FROM (SELECT order_id % 40 AS slot, currency, qty, rt FROM orders)
)
WHERE rownum = 1;
CREATE VIEW latest_big_per_qty AS
SELECT qty AS q, order_id AS last_order, currency AS last_currency
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY qty ORDER BY rt DESC) AS rownum
  FROM orders WHERE amount > 985
)
WHERE rownum = 1;
-- LEFT JOIN: every slot, with its quantity's latest big order when there is one.
CREATE TABLE slots_matched (currency STRING, slots BIGINT, matched BIGINT, orders BIGINT,
  PRIMARY KEY (currency) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/slots_matched.db', 'table-name' = 'slots_matched');
INSERT INTO slots_matched
SELECT s.currency, COUNT(*), COUNT(l.q), SUM(l.last_order)
FROM latest_per_slot s LEFT JOIN latest_big_per_qty l ON s.qty = l.q
GROUP BY s.currency;
-- FULL JOIN: slots and quantities, matched or not.
CREATE TABLE both_sides (currency STRING, slots BIGINT, quantities BIGINT, pairs BIGINT,
  PRIMARY KEY (currency) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/both_sides.db', 'table-name' = 'both_sides');
INSERT INTO both_sides
SELECT COALESCE(s.currency, l.last_currency), COUNT(s.slot), COUNT(l.q), COUNT(*)
FROM latest_per_slot s FULL JOIN latest_big_per_qty l ON s.qty = l.q
GROUP BY COALESCE(s.currency, l.last_currency);
-- RIGHT JOIN of append-only rows: each quantity's latest big order with the tiny orders of it.
CREATE TABLE tiny_per_latest (last_currency STRING, tiny BIGINT, quantities BIGINT,
  PRIMARY KEY (last_currency) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/tiny_per_latest.db', 'table-name' = 'tiny_per_latest');
INSERT INTO tiny_per_latest
SELECT l.last_currency, COUNT(o.order_id), COUNT(*)
FROM (SELECT * FROM orders WHERE amount < 15) o RIGHT JOIN latest_big_per_qty l ON o.qty = l.q
GROUP BY l.last_currency;
