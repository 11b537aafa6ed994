-- SELECT DISTINCT: each distinct row once. Flink's result is updates (written to a table with a
-- primary key, here SQLite; run_flink.py applies Flink's changelog to a table of the same key);
-- weir's is append-only, each row when the watermark reaches its first occurrence.
SET 'table.exec.state.ttl' = '1 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE distinct_pairs (currency STRING, qty BIGINT, PRIMARY KEY (currency, qty) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/distinct_pairs.db', 'table-name' = 'distinct_pairs');
INSERT INTO distinct_pairs SELECT DISTINCT currency, qty FROM orders;
CREATE TABLE distinct_buckets (currency STRING, bucket BIGINT, size STRING,
  PRIMARY KEY (currency, bucket, size) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/distinct_buckets.db', 'table-name' = 'distinct_buckets');
INSERT INTO distinct_buckets
SELECT DISTINCT currency, qty / 5 AS bucket, CASE WHEN amount > 900 THEN 'big' ELSE 'small' END AS size
FROM orders WHERE qty > 3;
