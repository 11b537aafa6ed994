-- Issue 24 item 1: COUNT(DISTINCT ...) and the other aggregates in SESSION windows whose sessions merge (a 4-second gap; a currency's orders are about 5 s apart and arrive up to 2 s out of order, so a late order often joins two sessions into one).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE session_distinct (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  n BIGINT, qtys BIGINT, amounts BIGINT, qty_groups BIGINT, total DECIMAL(38, 2), lo BIGINT, hi BIGINT, avg_qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/session_distinct', 'format' = 'csv');
INSERT INTO session_distinct
SELECT currency, window_start, window_end, COUNT(*), COUNT(DISTINCT qty), COUNT(DISTINCT amount),
  COUNT(DISTINCT qty / 5), SUM(amount), MIN(qty), MAX(qty), AVG(qty)
FROM TABLE(SESSION(TABLE orders PARTITION BY currency, DESCRIPTOR(rt), INTERVAL '4' SECOND))
GROUP BY currency, window_start, window_end;
