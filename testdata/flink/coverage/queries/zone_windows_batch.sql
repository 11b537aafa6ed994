-- Issue 24 item 6 in batch execution: window table functions over a TIMESTAMP_LTZ are aligned to
-- the session zone's local time as in streaming (no row is late in batch). Group windows over
-- one are refused in weir's batch execution: Flink's batch mode aligns them to UTC.
SET 'execution.runtime-mode' = 'batch';
SET 'table.local-time-zone' = 'America/New_York';
CREATE TABLE zoned_events (id BIGINT, k STRING, ts BIGINT, amount INT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${input}/zoned_events.csv', 'format' = 'csv');
CREATE TABLE zwb_days (k STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  window_time TIMESTAMP_LTZ(3), n BIGINT, total INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/zwb_days', 'format' = 'csv');
CREATE TABLE zwb_hours (window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/zwb_hours', 'format' = 'csv');
CREATE TABLE zwb_cumulate (window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/zwb_cumulate', 'format' = 'csv');
INSERT INTO zwb_days
SELECT k, window_start, window_end, window_time, COUNT(*), SUM(amount)
FROM TABLE(TUMBLE(TABLE zoned_events, DESCRIPTOR(rt), INTERVAL '1' DAY))
GROUP BY k, window_start, window_end, window_time;
INSERT INTO zwb_hours
SELECT window_start, window_end, COUNT(*)
FROM TABLE(TUMBLE(TABLE zoned_events, DESCRIPTOR(rt), INTERVAL '1' HOUR))
GROUP BY window_start, window_end;
INSERT INTO zwb_cumulate
SELECT window_start, window_end, COUNT(*)
FROM TABLE(CUMULATE(TABLE zoned_events, DESCRIPTOR(rt), INTERVAL '6' HOUR, INTERVAL '1' DAY))
GROUP BY window_start, window_end;
