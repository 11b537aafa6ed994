-- Issue 24 item 6: windows over a TIMESTAMP_LTZ time attribute in a zone with DST (New York
-- changes on 2024-03-10, a 23-hour day, and 2024-11-03, a 25-hour day): Flink aligns them to
-- local time (a day window starts at local midnight) and window_start / window_end are local
-- TIMESTAMPs, window_time a TIMESTAMP_LTZ: the window table function's rows, ranked per local day.
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
