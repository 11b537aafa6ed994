-- Issue 24 item 4: DECIMAL division with Flink's result types (DECIMAL(10, 2) / INT is DECIMAL(21, 13)) and rounding half up, written at full width, as text, and narrowed by the sink's columns.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE decimal_division (order_id BIGINT, per_item_int DECIMAL(21, 13), per_item_big DECIMAL(30, 22),
  per_item_cents DECIMAL(10, 2), per_item_text STRING, third DECIMAL(21, 13), ratio DECIMAL(38, 6),
  inverse DECIMAL(10, 4), halves DECIMAL(10, 1))
WITH ('connector' = 'filesystem', 'path' = '${output}/decimal_division', 'format' = 'csv');
INSERT INTO decimal_division
SELECT order_id, amount / CAST(qty AS INT), amount / qty, amount / qty, CAST(amount / CAST(qty AS INT) AS STRING),
  amount / 3, amount / (amount + 1), 1000 / (amount + 1), CAST(qty AS DECIMAL(10, 2)) / 4
FROM orders;
