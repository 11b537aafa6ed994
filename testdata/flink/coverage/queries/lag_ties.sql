-- Issue 24 item 5: LAG and OVER aggregates over rows of one key at the same event time. Flink's frame for ORDER BY rt is RANGE: the rows of one time (peers) are taken together, in arrival order, and every peer gets the values after the last of them (LAG: the row before the last peer; SUM and COUNT: all peers included).
SET 'table.exec.state.ttl' = '1 d';
CREATE TABLE ties (id BIGINT, k STRING, x BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '2' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/ties.csv', 'format' = 'csv');
CREATE TABLE lag_ties (id BIGINT, k STRING, ts BIGINT, x BIGINT, prev_x BIGINT, run BIGINT, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/lag_ties', 'format' = 'csv');
INSERT INTO lag_ties
SELECT id, k, ts, x, LAG(x) OVER w, SUM(x) OVER w, COUNT(*) OVER w
FROM ties
WINDOW w AS (PARTITION BY k ORDER BY rt);
CREATE TABLE lag_ties_alone (id BIGINT, k STRING, prev_x BIGINT, prev2_x BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/lag_ties_alone', 'format' = 'csv');
INSERT INTO lag_ties_alone
SELECT id, k, LAG(x) OVER w, LAG(x, 2, CAST(-1 AS BIGINT)) OVER w
FROM ties
WINDOW w AS (PARTITION BY k ORDER BY rt);
