-- Issue 14 item 4: CUMULATE windows (1-minute steps up to 5 minutes) per currency.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE cumulative (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  n BIGINT, qty BIGINT, max_amount DECIMAL(10, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/cumulative', 'format' = 'csv');
INSERT INTO cumulative
SELECT currency, window_start, window_end, COUNT(*), SUM(qty), MAX(amount)
FROM TABLE(CUMULATE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE))
GROUP BY currency, window_start, window_end;
