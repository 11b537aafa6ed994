-- Issue 24 item 13: INTERSECT and EXCEPT, each distinct row once, as updates keyed by every
-- column: a (currency, qty) pair of a big order leaves EXCEPT's result when a small order
-- with the same pair comes. The state TTL outlasts the input (weir's runs in event time,
-- Flink's in processing time). run_flink.py applies Flink's changelog to a table keyed by the
-- primary key.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE in_both (currency STRING, qty BIGINT, PRIMARY KEY (currency, qty) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/in_both.db', 'table-name' = 'in_both');
INSERT INTO in_both
SELECT currency, qty FROM orders WHERE amount > 960
INTERSECT
SELECT currency, qty FROM orders WHERE amount < 40;
CREATE TABLE big_only (currency STRING, qty BIGINT, PRIMARY KEY (currency, qty) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/big_only.db', 'table-name' = 'big_only');
INSERT INTO big_only
SELECT currency, qty FROM orders WHERE amount > 960
EXCEPT
SELECT currency, qty FROM orders WHERE amount < 40;
-- Columns of different types on the two sides meet in a common type.
CREATE TABLE quantities_not_ids (qty BIGINT, PRIMARY KEY (qty) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/quantities_not_ids.db', 'table-name' = 'quantities_not_ids');
INSERT INTO quantities_not_ids
SELECT qty FROM orders WHERE currency = 'C1'
EXCEPT
SELECT CAST(order_id % 15 AS INT) FROM orders WHERE amount < 10;
