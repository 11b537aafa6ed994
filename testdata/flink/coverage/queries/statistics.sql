-- Issue 24 item 9: STDDEV_POP, STDDEV_SAMP, STDDEV, VAR_POP, VAR_SAMP and VARIANCE of DECIMAL,
-- BIGINT, INT and DOUBLE (Flink's types: the argument's, DECIMAL(38, 6) for DECIMAL(10, 2)), in
-- tumbling windows (a window of one row: the samples are NULL), a session window (merged
-- sessions) and with HAVING. DOUBLE results are compared to 8 decimals: Flink's two-phase window
-- aggregation merges partial states where its batching falls, and the last bits of a DOUBLE
-- follow those points (a second run of the same job on the same machine agrees with itself); so
-- can an integer result, the DOUBLE truncated, where the exact value is a whole number.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE statistics (currency STRING, window_start TIMESTAMP(3), n BIGINT,
  sd_p DECIMAL(38, 6), sd_s DECIMAL(38, 6), v_p DECIMAL(38, 6), v_s DECIMAL(38, 6),
  sd_qty BIGINT, var_qty BIGINT, var_qty_int INT, sd_double DECIMAL(20, 8),
  var_double DECIMAL(20, 8), sd_div DECIMAL(20, 8), v DECIMAL(38, 6)
) WITH ('connector' = 'filesystem', 'path' = '${output}/statistics', 'format' = 'csv');
CREATE TABLE session_statistics (currency STRING, window_start TIMESTAMP(3), n BIGINT,
  sd_p DECIMAL(38, 6), v_s_qty DECIMAL(20, 6))
WITH ('connector' = 'filesystem', 'path' = '${output}/session_statistics', 'format' = 'csv');
INSERT INTO statistics
SELECT currency, window_start, COUNT(*), STDDEV_POP(amount), STDDEV_SAMP(amount), VAR_POP(amount),
  VAR_SAMP(amount), STDDEV_POP(qty), VAR_SAMP(qty), VAR_POP(CAST(qty AS INT)),
  CAST(STDDEV_SAMP(CAST(amount AS DOUBLE)) AS DECIMAL(20, 8)),
  CAST(VAR_POP(CAST(amount AS DOUBLE)) AS DECIMAL(20, 8)),
  CAST(STDDEV(CAST(qty AS DOUBLE) / 7) AS DECIMAL(20, 8)), VARIANCE(amount)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '2' SECOND))
GROUP BY currency, window_start, window_end;
INSERT INTO session_statistics
SELECT currency, window_start, COUNT(*), STDDEV_POP(amount),
  CAST(VAR_SAMP(CAST(qty AS DOUBLE)) AS DECIMAL(20, 6))
FROM TABLE(SESSION(TABLE orders PARTITION BY currency, DESCRIPTOR(rt), INTERVAL '3' SECOND))
GROUP BY currency, window_start, window_end
HAVING VAR_POP(qty) >= 1;
