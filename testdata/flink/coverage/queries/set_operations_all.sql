-- Issue 24 item 13: INTERSECT ALL and EXCEPT ALL into tables keyed by every column. Flink's
-- result holds a row min(l, r) times (INTERSECT ALL) or l - r times (EXCEPT ALL), l and r its
-- rows on each side; a table keyed by the row holds it once while that count is above zero.
-- A (currency, qty bucket) pair of big orders leaves EXCEPT ALL's result once as many small
-- orders share it. The state TTL outlasts the input (weir's runs in event time, Flink's in
-- processing time). run_flink.py applies Flink's changelog to a table keyed by the primary key.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE in_both_all (currency STRING, bucket BIGINT, PRIMARY KEY (currency, bucket) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/in_both_all.db', 'table-name' = 'in_both_all');
INSERT INTO in_both_all
SELECT currency, qty % 7 AS bucket FROM orders WHERE amount > 900
INTERSECT ALL
SELECT currency, qty % 7 FROM orders WHERE amount < 30;
CREATE TABLE more_big_than_small (currency STRING, bucket BIGINT, PRIMARY KEY (currency, bucket) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/more_big_than_small.db', 'table-name' = 'more_big_than_small');
INSERT INTO more_big_than_small
SELECT currency, qty % 7 AS bucket FROM orders WHERE amount > 500
EXCEPT ALL
SELECT currency, qty % 7 FROM orders WHERE amount <= 500;
