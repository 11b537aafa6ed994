-- Issue 14 item 6: deduplication without a window. Keeping each key's first row by event time is
-- append-only (Flink 2.3's insert-only deduplication, emitted when the watermark passes the row);
-- keeping its latest row gives updates per key, written to a table with a primary key (here a
-- SQLite table; run_flink.py applies Flink's changelog to a table of the same key). The first
-- rows keep their time attribute, so a window aggregation can count them.
SET 'table.exec.state.ttl' = '1 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE first_per_key (currency STRING, qty BIGINT, order_id BIGINT, amount DECIMAL(10, 2), ts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/first_per_key', 'format' = 'csv');
INSERT INTO first_per_key
SELECT currency, qty, order_id, amount, ts
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency, qty ORDER BY rt ASC) AS rownum
  FROM orders
)
WHERE rownum = 1;
CREATE TABLE latest_per_key (currency STRING, qty BIGINT, order_id BIGINT, amount DECIMAL(10, 2), ts BIGINT,
  PRIMARY KEY (currency, qty) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/latest_per_key.db', 'table-name' = 'latest_per_key');
INSERT INTO latest_per_key
SELECT currency, qty, order_id, amount, ts
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency, qty ORDER BY rt DESC) AS rownum
  FROM orders
)
WHERE rownum = 1;
CREATE VIEW first_orders AS
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency, qty ORDER BY rt) AS rownum
  FROM orders
) WHERE rownum = 1;
CREATE TABLE new_keys_per_window (window_start TIMESTAMP(3), currency STRING, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/new_keys_per_window', 'format' = 'csv');
INSERT INTO new_keys_per_window
SELECT window_start, currency, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE first_orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, currency;
