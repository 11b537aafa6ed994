-- Issue 14 item 5: SESSION windows partitioned by currency (15-second gap; a currency's orders are a few seconds apart, so sessions split).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE sessions_by_currency (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  n BIGINT, qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/sessions_by_currency', 'format' = 'csv');
INSERT INTO sessions_by_currency
SELECT currency, window_start, window_end, COUNT(*), SUM(qty)
FROM TABLE(SESSION(TABLE orders PARTITION BY currency, DESCRIPTOR(rt), INTERVAL '15' SECOND))
GROUP BY currency, window_start, window_end;
