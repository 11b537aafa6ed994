-- Issue 24 item 6: the session time zone, with DST (New York changes on 2024-03-10 and 2024-11-03):
-- a TIMESTAMP_LTZ read as a local time (CAST, DATE_FORMAT, EXTRACT, FROM_UNIXTIME, a TIMESTAMP
-- sink column) and local times read as instants (CAST to TIMESTAMP_LTZ, UNIX_TIMESTAMP), a
-- skipped and a repeated local hour among them; windows over a TIMESTAMP time attribute do not move.
SET 'table.local-time-zone' = 'America/New_York';
CREATE TABLE zoned (id BIGINT, ts BIGINT, wall STRING, d STRING, rt AS TO_TIMESTAMP_LTZ(NULLIF(ts, -1), 3))
WITH ('connector' = 'filesystem', 'path' = '${input}/zoned.csv', 'format' = 'csv');
CREATE TABLE zoned_walls (id BIGINT, ts BIGINT, wt TIMESTAMP(3), d STRING,
  WATERMARK FOR wt AS wt - INTERVAL '1' DAY)
WITH ('connector' = 'filesystem', 'path' = '${input}/zoned.csv', 'format' = 'csv');
CREATE TABLE local_times (id BIGINT, rt TIMESTAMP_LTZ(3), rt_text STRING, rt_local TIMESTAMP(3),
  rt_date DATE, rt_time TIME, formatted STRING, hr BIGINT, dy BIGINT, from_unix STRING,
  rt_in_timestamp TIMESTAMP(3), next_day TIMESTAMP_LTZ(3), hours_to INT, local_text STRING,
  floor_day STRING, ceil_day STRING, floor_hour TIMESTAMP_LTZ(3), ceil_month STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/local_times', 'format' = 'csv');
CREATE TABLE instants (id BIGINT, wall STRING, unix BIGINT, wall_ltz TIMESTAMP_LTZ(3),
  text_ltz TIMESTAMP_LTZ(3), date_ltz TIMESTAMP_LTZ(3), round_trip BOOLEAN)
WITH ('connector' = 'filesystem', 'path' = '${output}/instants', 'format' = 'csv');
CREATE TABLE wall_hours (window_start TIMESTAMP(3), window_end TIMESTAMP(3), hh STRING, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/wall_hours', 'format' = 'csv');
INSERT INTO local_times
SELECT id, rt, CAST(rt AS STRING), CAST(rt AS TIMESTAMP(3)), CAST(rt AS DATE), CAST(rt AS TIME),
  DATE_FORMAT(rt, 'yyyy-MM-dd HH:mm:ss'), -- Flink's EXTRACT of a time before 1970 is off (HOUR -7 for 16:17): a documented difference.
  CASE WHEN ts > 86400000 THEN EXTRACT(HOUR FROM rt) END,
  CASE WHEN ts > 86400000 THEN EXTRACT(DAY FROM rt) END,
  FROM_UNIXTIME(NULLIF(ts, -1) / 1000), rt, rt + INTERVAL '1' DAY,
  TIMESTAMPDIFF(HOUR, rt, TO_TIMESTAMP_LTZ(1710144000000, 3)),
  CAST(CAST(rt AS TIMESTAMP(3)) AS STRING),
  -- FLOOR / CEIL of a TIMESTAMP_LTZ: of its local time, back by the offset at rt (so across a
  -- DST change the day's floor is an hour off midnight, as Flink's).
  CASE WHEN ts > 86400000 THEN CAST(FLOOR(rt TO DAY) AS STRING) END,
  CASE WHEN ts > 86400000 THEN CAST(CEIL(rt TO DAY) AS STRING) END,
  CASE WHEN ts > 86400000 THEN FLOOR(rt TO HOUR) END,
  CASE WHEN ts > 86400000 THEN CAST(CEIL(rt TO MONTH) AS STRING) END
FROM zoned;
INSERT INTO instants
SELECT id, wall, UNIX_TIMESTAMP(wall), CAST(CAST(wall AS TIMESTAMP(3)) AS TIMESTAMP_LTZ(3)),
  CAST(wall AS TIMESTAMP_LTZ(3)), CAST(CAST(NULLIF(d, '-') AS DATE) AS TIMESTAMP_LTZ(3)),
  CAST(CAST(CAST(rt AS TIMESTAMP(3)) AS TIMESTAMP_LTZ(3)) AS STRING) = CAST(rt AS STRING)
FROM zoned;
INSERT INTO wall_hours
SELECT window_start, window_end, DATE_FORMAT(window_start, 'HH:mm'), COUNT(*)
FROM TABLE(TUMBLE(TABLE zoned_walls, DESCRIPTOR(wt), INTERVAL '1' HOUR))
GROUP BY window_start, window_end;
