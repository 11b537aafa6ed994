-- Issue 14 item 4, planned in two phases: CUMULATE windows whose partial rows carry their end (the windows share a start), COUNT of a column and a FILTER among the aggregates.
SET 'table.optimizer.agg-phase-strategy' = 'TWO_PHASE';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE cumulative_two_phase (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  n BIGINT, qty BIGINT, max_amount DECIMAL(10, 2), n_big BIGINT, n_qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/cumulative_two_phase', 'format' = 'csv');
INSERT INTO cumulative_two_phase
SELECT currency, window_start, window_end, COUNT(*), SUM(qty), MAX(amount),
  COUNT(*) FILTER (WHERE qty > 10), COUNT(qty)
FROM TABLE(CUMULATE(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE))
GROUP BY currency, window_start, window_end;
