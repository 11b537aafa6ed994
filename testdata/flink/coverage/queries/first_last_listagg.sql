-- Issue 24 item 9: FIRST_VALUE, LAST_VALUE and LISTAGG (with and without a separator) in windows,
-- NULLs among the values; rows of a key arrive in file order (one file, one reader), so the
-- first and last are those of the file, in both engines.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE first_last (currency STRING, window_start TIMESTAMP(3), first_id BIGINT,
  last_id BIGINT, first_big STRING, last_big_amount DECIMAL(10, 2), ids STRING, big_qtys STRING,
  first_rt TIMESTAMP_LTZ(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/first_last', 'format' = 'csv');
INSERT INTO first_last
SELECT currency, window_start, FIRST_VALUE(order_id), LAST_VALUE(order_id),
  FIRST_VALUE(CASE WHEN qty > 10 THEN CAST(order_id AS STRING) END),
  LAST_VALUE(CASE WHEN qty > 10 THEN amount END),
  LISTAGG(CAST(order_id AS STRING)),
  LISTAGG(CASE WHEN qty > 10 THEN CAST(qty AS STRING) END, '|'),
  FIRST_VALUE(rt)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' SECOND))
GROUP BY currency, window_start, window_end;
