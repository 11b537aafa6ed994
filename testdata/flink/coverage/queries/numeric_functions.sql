-- MOD, SIGN, TRUNCATE and FLOOR / CEIL of a timestamp TO a unit (#24 item 9): values and their
-- types (cast to STRING, so a DECIMAL keeps its scale in the text), negative operands included.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE numeric_functions (order_id BIGINT, m1 STRING, m2 STRING, m3 STRING, s1 STRING, s2 STRING,
  s3 STRING, t1 STRING, t2 STRING, t3 STRING, t4 STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/numeric_functions', 'format' = 'csv');
INSERT INTO numeric_functions
SELECT order_id,
  CAST(MOD(qty, 7) AS STRING), CAST(MOD(0 - qty, 7) AS STRING), CAST(MOD(amount, 7) AS STRING),
  CAST(SIGN(amount - 500) AS STRING), CAST(SIGN(qty - 10) AS STRING),
  CAST(SIGN(CAST(amount AS DOUBLE) - 500) AS STRING),
  CAST(TRUNCATE(amount, 1) AS STRING), CAST(TRUNCATE(qty * 11, -1) AS STRING),
  CAST(TRUNCATE(CAST(amount AS DOUBLE) / 7, 2) AS STRING), CAST(TRUNCATE(0 - amount, 0) AS STRING)
FROM orders;
CREATE TABLE floor_ceil (order_id BIGINT, f_min TIMESTAMP(3), c_hour TIMESTAMP(3), f_day TIMESTAMP(3),
  c_sec TIMESTAMP(3), f_month TIMESTAMP(3), c_year TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/floor_ceil', 'format' = 'csv');
INSERT INTO floor_ceil
SELECT order_id, FLOOR(CAST(rt AS TIMESTAMP(3)) TO MINUTE), CEIL(CAST(rt AS TIMESTAMP(3)) TO HOUR),
  FLOOR(CAST(rt AS TIMESTAMP(3)) TO DAY), CEIL(CAST(rt AS TIMESTAMP(3)) TO SECOND),
  FLOOR(CAST(rt AS TIMESTAMP(3)) TO MONTH), CEIL(CAST(rt AS TIMESTAMP(3)) TO YEAR)
FROM orders;
