-- Issue 14 item 7: COUNT(DISTINCT ...) exact, in windows.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE distinct_qty (currency STRING, window_start TIMESTAMP(3), n BIGINT, qtys BIGINT, amounts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/distinct_qty', 'format' = 'csv');
INSERT INTO distinct_qty
SELECT currency, window_start, COUNT(*), COUNT(DISTINCT qty), COUNT(DISTINCT amount)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '2' MINUTE))
GROUP BY currency, window_start, window_end;
