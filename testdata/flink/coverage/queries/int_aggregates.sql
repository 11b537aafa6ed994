-- Issue 14 item 1, narrower numbers: SUM / MIN / MAX / AVG over INT, SMALLINT and TINYINT expressions and an INT function result (weir aggregates them as BIGINT; the INT sink columns give Flink's types).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE int_aggregates (currency STRING, window_start TIMESTAMP(3), sum_qty INT, max_qty INT,
  min_qty INT, avg_qty INT, max_minute INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/int_aggregates', 'format' = 'csv');
INSERT INTO int_aggregates
SELECT currency, window_start, SUM(CAST(qty AS INT)), MAX(CAST(qty AS SMALLINT)), MIN(CAST(qty AS TINYINT)),
  AVG(CAST(qty AS INT)), MAX(TIMESTAMPDIFF(MINUTE, TO_TIMESTAMP_LTZ(0, 3), rt))
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '5' MINUTE))
GROUP BY currency, window_start, window_end;
