-- Issue 24 item 12: filters over changelogs. A key whose new row fails the condition while its
-- old one passed must leave the upsert table (its -U deletes it); HAVING on a GROUP BY without
-- a window is the same filter over the GROUP BY's updates. The state TTL outlasts the input
-- (weir's runs in event time, Flink's in processing time).
-- run_flink.py applies Flink's changelog to a table keyed by the primary key.
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
-- A WHERE over a view of the latest row per slot.
CREATE TABLE big_slots (slot BIGINT, currency STRING, amount DECIMAL(10, 2),
  PRIMARY KEY (slot) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/big_slots.db', 'table-name' = 'big_slots');
INSERT INTO big_slots
SELECT slot, currency, amount FROM latest_per_slot WHERE amount > 250 AND qty < 15;
-- The same condition in the deduplication's own WHERE, next to the rank's.
CREATE TABLE big_slots_inline (slot BIGINT, currency STRING, amount DECIMAL(10, 2),
  PRIMARY KEY (slot) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/big_slots_inline.db', 'table-name' = 'big_slots_inline');
INSERT INTO big_slots_inline
SELECT slot, currency, amount
FROM (
  SELECT slot, currency, amount, qty,
    ROW_NUMBER() OVER (PARTITION BY slot ORDER BY rt DESC) AS rownum
  FROM (SELECT order_id % 40 AS slot, currency, amount, qty, rt FROM orders)
)
WHERE rownum = 1 AND amount > 250 AND qty < 15;
-- HAVING: a slot passes while it has few orders, then leaves the table.
CREATE TABLE quiet_slots (slot BIGINT, orders BIGINT, amount DECIMAL(38, 2),
  PRIMARY KEY (slot) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/quiet_slots.db', 'table-name' = 'quiet_slots');
INSERT INTO quiet_slots
SELECT slot, COUNT(*), SUM(amount)
FROM (SELECT order_id % 97 AS slot, amount, qty FROM orders)
GROUP BY slot
HAVING COUNT(*) < 31 OR MAX(qty) < 19;
-- A WHERE over a GROUP BY view: a key comes and goes with its count's parity.
CREATE VIEW per_slot AS
SELECT slot, COUNT(*) AS orders, MAX(amount) AS highest
FROM (SELECT order_id % 53 AS slot, amount FROM orders)
GROUP BY slot;
CREATE TABLE even_slots (slot BIGINT, orders BIGINT, highest DECIMAL(10, 2),
  PRIMARY KEY (slot) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/even_slots.db', 'table-name' = 'even_slots');
INSERT INTO even_slots
SELECT slot, orders, highest FROM per_slot WHERE orders % 2 = 0 AND highest > 400;
