-- Issue 24 item 9: CROSS JOIN UNNEST, the comma form, LEFT JOIN UNNEST ... ON TRUE and WITH
-- ORDINALITY over arrays from SPLIT (inline and a view's column), then a window count of the
-- elements. Empty texts, empty parts and NULLs among the input.
CREATE TABLE tagged (id BIGINT, tag_text STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/tagged.csv', 'format' = 'csv');
CREATE VIEW tags AS
SELECT id, CASE tag_text WHEN 'none' THEN CAST(NULL AS STRING) WHEN '-' THEN '' ELSE tag_text END AS tags, rt
FROM tagged;
CREATE VIEW tag_arrays AS SELECT id, SPLIT(tags, ';') AS arr, rt FROM tags;
CREATE VIEW tag_events AS
SELECT a.rt, u.tag FROM tag_arrays AS a CROSS JOIN UNNEST(a.arr) AS u(tag);
CREATE TABLE unnested (id BIGINT, tag STRING, place INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/unnested', 'format' = 'csv');
CREATE TABLE unnested_comma (id BIGINT, tag STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/unnested_comma', 'format' = 'csv');
CREATE TABLE unnested_left (id BIGINT, tag STRING, tag_length INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/unnested_left', 'format' = 'csv');
CREATE TABLE tag_counts (window_start TIMESTAMP(3), tag STRING, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/tag_counts', 'format' = 'csv');
INSERT INTO unnested
SELECT t.id, u.tag, u.place FROM tags AS t
CROSS JOIN UNNEST(SPLIT(t.tags, ';')) WITH ORDINALITY AS u(tag, place);
INSERT INTO unnested_comma
SELECT id, tag FROM tag_arrays, UNNEST(arr) AS u(tag) WHERE tag <> '';
INSERT INTO unnested_left
SELECT id, tag, CHAR_LENGTH(tag) FROM tag_arrays LEFT JOIN UNNEST(arr) AS u(tag) ON TRUE;
INSERT INTO tag_counts
SELECT window_start, tag, COUNT(*)
FROM TABLE(TUMBLE(TABLE tag_events, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, tag;
