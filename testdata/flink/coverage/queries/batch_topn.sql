-- Top-N without a window in batch execution: each currency's final three biggest orders, rows
-- like any other (a file sink takes them), as Flink's batch execution writes them.
SET 'execution.runtime-mode' = 'batch';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE biggest (currency STRING, rownum BIGINT, order_id BIGINT, amount DECIMAL(10, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/biggest', 'format' = 'csv');
INSERT INTO biggest
SELECT currency, rownum, order_id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency ORDER BY amount DESC, order_id) AS rownum
  FROM orders
) WHERE rownum <= 3;
