-- Issue 24 item 6: windows over a TIMESTAMP_LTZ time attribute in a zone with DST (New York
-- changes on 2024-03-10, a 23-hour day, and 2024-11-03, a 25-hour day): Flink aligns them to
-- local time (a day window starts at local midnight) and window_start / window_end are local
-- TIMESTAMPs, window_time a TIMESTAMP_LTZ: the window table function's rows, ranked per local day
-- and joined per local hour.
SET 'table.local-time-zone' = 'America/New_York';
CREATE TABLE zoned_events (id BIGINT, k STRING, ts BIGINT, amount INT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${input}/zoned_events.csv', 'format' = 'csv');
CREATE TABLE zw_top (window_start TIMESTAMP(3), window_end TIMESTAMP(3), id BIGINT, amount INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/zw_top', 'format' = 'csv');
INSERT INTO zw_top
SELECT window_start, window_end, id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY amount DESC, id) AS rn
  FROM TABLE(TUMBLE(TABLE zoned_events, DESCRIPTOR(rt), INTERVAL '1' DAY)))
WHERE rn <= 2;
CREATE TABLE zw_join (k STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  window_time TIMESTAMP_LTZ(3), lid BIGINT, rid BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/zw_join', 'format' = 'csv');
-- A window join per local hour: the hour the end of DST repeats holds both passes, and the late
-- rows (key l) in it are joined; the one in the hour before is late.
INSERT INTO zw_join
SELECT L.k, L.window_start, L.window_end, L.window_time, L.id, R.id
FROM (SELECT * FROM TABLE(TUMBLE(TABLE zoned_events, DESCRIPTOR(rt), INTERVAL '1' HOUR))) L
JOIN (SELECT * FROM TABLE(TUMBLE(TABLE zoned_events, DESCRIPTOR(rt), INTERVAL '1' HOUR))
  WHERE MOD(amount, 2) = 0) R
ON L.k = R.k AND L.window_start = R.window_start AND L.window_end = R.window_end;
-- After a window aggregation: its window_time is the time attribute of a day window over the
-- hours, and a Top-N per local hour ranks its rows.
CREATE VIEW hourly AS
SELECT k, window_start, window_end, window_time, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE zoned_events, DESCRIPTOR(rt), INTERVAL '1' HOUR))
GROUP BY k, window_start, window_end, window_time;
CREATE VIEW hour_counts AS SELECT k, window_time AS hour_time, n FROM hourly;
CREATE TABLE zw_cascade (k STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  window_time TIMESTAMP_LTZ(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/zw_cascade', 'format' = 'csv');
CREATE TABLE zw_top_hours (window_start TIMESTAMP(3), window_end TIMESTAMP(3), k STRING, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/zw_top_hours', 'format' = 'csv');
INSERT INTO zw_cascade
SELECT k, window_start, window_end, window_time, SUM(n)
FROM TABLE(TUMBLE(TABLE hour_counts, DESCRIPTOR(hour_time), INTERVAL '1' DAY))
GROUP BY k, window_start, window_end, window_time;
INSERT INTO zw_top_hours
SELECT window_start, window_end, k, n FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC, k) AS rn
  FROM hourly)
WHERE rn <= 1;
