-- Issue 14 item 6: window Top-N over a window table function's rows (tumbling and hopping) and over a window
-- aggregation's results, and window deduplication (keep the first and the last row).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE top_orders (window_start TIMESTAMP(3), window_end TIMESTAMP(3), currency STRING,
  order_id BIGINT, amount DECIMAL(10, 2), rownum BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/top_orders', 'format' = 'csv');
INSERT INTO top_orders
SELECT window_start, window_end, currency, order_id, amount, rownum
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, currency ORDER BY amount DESC) AS rownum
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
) ranked
WHERE rownum <= 3;
CREATE TABLE top_currencies (window_start TIMESTAMP(3), currency STRING, total DECIMAL(38, 2),
  n BIGINT, rownum BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/top_currencies', 'format' = 'csv');
INSERT INTO top_currencies
SELECT window_start, currency, total, n, rownum
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC) AS rownum
  FROM (
    SELECT window_start, window_end, currency, SUM(amount) AS total, COUNT(*) AS n
    FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
    GROUP BY window_start, window_end, currency
  ) sums
) ranked
WHERE rownum <= 2;
CREATE TABLE first_orders (window_start TIMESTAMP(3), currency STRING, order_id BIGINT, ts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/first_orders', 'format' = 'csv');
INSERT INTO first_orders
SELECT window_start, currency, order_id, ts
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, currency ORDER BY rt ASC) AS rownum
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
) deduplicated
WHERE rownum = 1;
CREATE TABLE last_orders (window_start TIMESTAMP(3), currency STRING, order_id BIGINT, ts BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/last_orders', 'format' = 'csv');
INSERT INTO last_orders
SELECT window_start, currency, order_id, ts
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, currency ORDER BY rt DESC) AS rownum
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
) deduplicated
WHERE rownum <= 1;
CREATE TABLE top_orders_hop (window_start TIMESTAMP(3), window_end TIMESTAMP(3), currency STRING,
  order_id BIGINT, qty BIGINT, rownum BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/top_orders_hop', 'format' = 'csv');
INSERT INTO top_orders_hop
SELECT window_start, window_end, currency, order_id, qty, rownum
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, currency ORDER BY amount DESC) AS rownum
  FROM TABLE(HOP(TABLE orders, DESCRIPTOR(rt), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE))
) ranked
WHERE rownum <= 2;
