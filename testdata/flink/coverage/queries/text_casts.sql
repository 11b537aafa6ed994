-- Issue 24 items 2 and 3: CONCAT is NULL when an argument is NULL, CONCAT_WS skips NULLs, and text with a fraction cast to an integer type is truncated.
CREATE TABLE events (id BIGINT, tags STRING, kv STRING, js STRING, ds STRING, n INT)
WITH ('connector' = 'filesystem', 'path' = '${input}/events.csv', 'format' = 'csv');
CREATE TABLE text_casts (id BIGINT, joined STRING, joined_ws STRING, piped STRING, price STRING,
  price_int INT, price_big BIGINT, price_small SMALLINT, id_int INT, neg INT, ds_int INT)
WITH ('connector' = 'filesystem', 'path' = '${output}/text_casts', 'format' = 'csv');
INSERT INTO text_casts
SELECT id,
  CONCAT(NULLIF(tags, '-'), '/', NULLIF(kv, '-')),
  CONCAT_WS('/', NULLIF(tags, '-'), NULLIF(kv, '-'), 'end'),
  NULLIF(kv, '-') || '|',
  JSON_VALUE(js, '$.items[0]'),
  TRY_CAST(JSON_VALUE(js, '$.items[0]') AS INT),
  TRY_CAST(JSON_VALUE(js, '$.items[0]') AS BIGINT),
  TRY_CAST(JSON_VALUE(js, '$.items[0]') AS SMALLINT),
  CAST(CONCAT(CAST(id AS STRING), '.75') AS INT),
  CAST(CONCAT('-', CAST(ABS(n) AS STRING), '.9') AS INT),
  TRY_CAST(ds AS INT)
FROM events;
