-- Issue 14, Flink's types: SMALLINT, TINYINT, DATE, TIME (whole seconds: a fraction in the input
-- is cut) and TIME(3) columns read from CSV, computed on, aggregated in windows, and written as
-- Flink writes them in CSV and JSON. (Flink's SUM of a SMALLINT is a SMALLINT that wraps around
-- on overflow; weir's is exact, so the sum here is over INT.)
CREATE TABLE typed (id BIGINT, s SMALLINT, t TINYINT, d DATE, tm TIME, tm3 TIME(3), ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/typed.csv', 'format' = 'csv');
CREATE TABLE typed_rows (id BIGINT, s SMALLINT, t TINYINT, d DATE, tm TIME, tm3 TIME(3),
  s_plus INT, next_day DATE, later DATE, t_wide INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/typed_rows', 'format' = 'csv');
INSERT INTO typed_rows
SELECT id, s, t, d, tm, tm3, s + 1, d + INTERVAL '1' DAY, CASE WHEN d > DATE '2000-01-01' THEN d END,
  CAST(t AS INT) * 2
FROM typed;
CREATE TABLE typed_json (id BIGINT, s SMALLINT, t TINYINT, d DATE, tm TIME, tm3 TIME(3))
WITH ('connector' = 'filesystem', 'path' = '${output}/typed_json', 'format' = 'json');
INSERT INTO typed_json SELECT id, s, t, d, tm, tm3 FROM typed WHERE t < 0;
CREATE TABLE typed_windows (window_start TIMESTAMP(3), n BIGINT, sum_s INT, min_t TINYINT,
  max_s SMALLINT, max_d DATE, min_tm TIME)
WITH ('connector' = 'filesystem', 'path' = '${output}/typed_windows', 'format' = 'csv');
INSERT INTO typed_windows
SELECT window_start, COUNT(*), SUM(CAST(s AS INT)), MIN(t), MAX(s), MAX(d), MIN(tm)
FROM TABLE(TUMBLE(TABLE typed, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
