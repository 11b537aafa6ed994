-- Issue 14 item 7: HAVING on a window aggregation, with an aggregate only HAVING uses.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE busy_minutes (currency STRING, window_start TIMESTAMP(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/busy_minutes', 'format' = 'csv');
INSERT INTO busy_minutes
SELECT currency, window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
GROUP BY currency, window_start, window_end
HAVING COUNT(*) >= 12 AND SUM(amount) > 5500 AND MAX(qty) = 20;
