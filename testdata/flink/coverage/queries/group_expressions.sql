-- GROUP BY over expressions, as Flink allows: in a GROUP BY without a window (selected under
-- an alias, unnamed, and in HAVING) and in a window aggregation. The state TTL outlasts the
-- input. run_flink.py applies Flink's changelog to a table keyed by the primary key.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE per_slot (slot BIGINT, orders BIGINT, amount DECIMAL(38, 2),
  PRIMARY KEY (slot) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/per_slot.db', 'table-name' = 'per_slot');
INSERT INTO per_slot
SELECT order_id % 97 AS slot, COUNT(*), SUM(amount) FROM orders GROUP BY order_id % 97;
CREATE TABLE per_band (currency STRING, band BIGINT, orders BIGINT, size STRING,
  PRIMARY KEY (currency, band) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/per_band.db', 'table-name' = 'per_band');
INSERT INTO per_band
SELECT currency, qty / 5, COUNT(*), CASE WHEN qty / 5 > 2 THEN 'big' ELSE 'small' END
FROM orders
GROUP BY currency, qty / 5
HAVING qty / 5 > 0 AND COUNT(*) > 20;
CREATE TABLE per_minute_size (window_start TIMESTAMP(3), size STRING, orders BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/per_minute_size', 'format' = 'csv');
INSERT INTO per_minute_size
SELECT window_start, CASE WHEN amount > 500 THEN 'big' ELSE 'small' END AS size, COUNT(*)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, CASE WHEN amount > 500 THEN 'big' ELSE 'small' END;
