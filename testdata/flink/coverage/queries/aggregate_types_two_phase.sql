-- Issue 14 item 1, planned in two phases (local pre-aggregation): SUM / MIN / MAX / AVG over DECIMAL, AVG of BIGINT, with Flink's result types.
SET 'table.optimizer.agg-phase-strategy' = 'TWO_PHASE';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE aggregate_types_two_phase (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  n BIGINT, sum_amount DECIMAL(38, 2), min_amount DECIMAL(10, 2), max_amount DECIMAL(10, 2),
  avg_amount DECIMAL(38, 6), sum_qty BIGINT, avg_qty BIGINT, max_qty BIGINT, min_qty BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${output}/aggregate_types_two_phase', 'format' = 'csv');
INSERT INTO aggregate_types_two_phase
SELECT currency, window_start, window_end, COUNT(*), SUM(amount), MIN(amount), MAX(amount),
       AVG(amount), SUM(qty), AVG(qty), MAX(qty), MIN(qty)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
GROUP BY currency, window_start, window_end;
CREATE TABLE averages_two_phase (currency STRING, window_start TIMESTAMP(3), avg_qty BIGINT, avg_amount DECIMAL(38, 6))
WITH ('connector' = 'filesystem', 'path' = '${output}/averages_two_phase', 'format' = 'csv');
INSERT INTO averages_two_phase
SELECT currency, window_start, AVG(qty), AVG(amount)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
GROUP BY currency, window_start, window_end;
