-- Issue 14 item 7: aggregate FILTER clauses, COUNT of a column and of a CASE with NULLs, in 2-minute tumbling windows.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
-- small_amount is NULL for every C0 window (its filter excludes C0); avg_qty is BIGINT (Flink's AVG keeps the argument type).
CREATE TABLE filtered_counts (currency STRING, window_start TIMESTAMP(3), big_orders BIGINT,
  small_amount DECIMAL(38, 2), n_qty BIGINT, n_huge BIGINT, max_qty_dear BIGINT, avg_qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/filtered_counts', 'format' = 'csv');
INSERT INTO filtered_counts
SELECT currency, window_start,
  COUNT(*) FILTER (WHERE qty > 10),
  SUM(amount) FILTER (WHERE currency <> 'C0' AND qty < 5),
  COUNT(qty),
  COUNT(CASE WHEN qty > 15 THEN qty END),
  MAX(qty) FILTER (WHERE amount > 500),
  AVG(qty) FILTER (WHERE qty > 3)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '2' MINUTE))
GROUP BY currency, window_start, window_end;
