-- Issue 24 item 9: LISTAGG(DISTINCT x[, separator]) in tumbling windows (Flink 2.3 refuses it in HOP
-- and CUMULATE windows: "This function does not support retraction"), NULLs and
-- repeated values among the values; rows of a key arrive in file order (one file, one reader), so
-- each distinct value's first arrival is the file's, in both engines. ONE_PHASE: Flink's two-phase
-- plan (its default at parallelism 2) joins the distinct values in its hash map's order instead.
SET 'table.optimizer.agg-phase-strategy' = 'ONE_PHASE';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE distinct_lists (currency STRING, window_start TIMESTAMP(3), qtys STRING,
  big_buckets STRING, all_qtys STRING, n_qtys BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/distinct_lists', 'format' = 'csv');
INSERT INTO distinct_lists
SELECT currency, window_start,
  LISTAGG(DISTINCT CAST(qty AS STRING)),
  LISTAGG(DISTINCT CASE WHEN qty > 10 THEN CAST(qty / 5 AS STRING) END, '|'),
  LISTAGG(CAST(qty AS STRING), ';'),
  COUNT(DISTINCT qty)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '10' SECOND))
GROUP BY currency, window_start, window_end;
