-- Issue 14 item 2: TIMESTAMP and TIMESTAMP_LTZ as Flink writes them in csv and json.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE timestamps_csv (order_id BIGINT, currency STRING, rt TIMESTAMP_LTZ(3), t TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/timestamps_csv', 'format' = 'csv');
CREATE TABLE timestamps_json (order_id BIGINT, rt TIMESTAMP_LTZ(3), t TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/timestamps_json', 'format' = 'json');
CREATE TABLE window_times (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/window_times', 'format' = 'json');
INSERT INTO timestamps_csv SELECT order_id, currency, rt, CAST(rt AS TIMESTAMP(3)) FROM orders WHERE order_id % 7 = 0;
INSERT INTO timestamps_json SELECT order_id, rt, CAST(rt AS TIMESTAMP(3)) FROM orders WHERE order_id % 7 = 0;
INSERT INTO window_times
SELECT currency, window_start, window_end, COUNT(*)
FROM TABLE(HOP(TABLE orders, DESCRIPTOR(rt), INTERVAL '30' SECOND, INTERVAL '1' MINUTE))
GROUP BY currency, window_start, window_end;
