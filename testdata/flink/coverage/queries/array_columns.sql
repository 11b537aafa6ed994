-- Issue 24 item 9: ARRAY columns of a JSON table (ARRAY<STRING>, ARRAY<INT>; NULL and empty
-- arrays among them): unnested, and written whole into a JSON table.
CREATE TABLE tagged (id BIGINT, tags ARRAY<STRING>, sizes ARRAY<INT>, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/tagged.json', 'format' = 'json');
CREATE TABLE array_tags (id BIGINT, tag STRING, size INT, place INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/array_tags', 'format' = 'csv');
CREATE TABLE array_rows (id BIGINT, tags ARRAY<STRING>, sizes ARRAY<INT>)
WITH ('connector' = 'filesystem', 'path' = '${output}/array_rows', 'format' = 'json');
INSERT INTO array_tags
SELECT t.id, u.tag, CHAR_LENGTH(u.tag), u.place
FROM tagged AS t CROSS JOIN UNNEST(t.tags) WITH ORDINALITY AS u(tag, place);
INSERT INTO array_rows SELECT id, tags, sizes FROM tagged WHERE id < 100;
