-- Issue 24 item 9: arrays built with ARRAY[...] and read by index, CARDINALITY, ELEMENT,
-- ARRAY_CONTAINS and ARRAY_JOIN, over rows with empty texts, empty parts and NULLs; an
-- ARRAY[...] unnested (columns into rows), and an array written as text.
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE tagged (id BIGINT, tag_text STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/tagged.csv', 'format' = 'csv');
CREATE TABLE tag_facts (id BIGINT, first_tag STRING, second_tag STRING, tags INT, has_a BOOLEAN,
  joined STRING, as_text STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/tag_facts', 'format' = 'csv');
INSERT INTO tag_facts
SELECT id, SPLIT(tag_text, ';')[1], SPLIT(tag_text, ';')[2], CARDINALITY(SPLIT(tag_text, ';')),
  ARRAY_CONTAINS(SPLIT(tag_text, ';'), 'a'), ARRAY_JOIN(SPLIT(tag_text, ';'), '|'),
  CAST(ARRAY[tag_text, CAST(id AS STRING)] AS STRING)
FROM tagged;
-- Columns into rows: each order's amount and quantity as two rows of one column, numbered.
CREATE TABLE order_figures (order_id BIGINT, place INT, figure DECIMAL(12, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/order_figures', 'format' = 'csv');
INSERT INTO order_figures
SELECT o.order_id, u.place, u.figure
FROM orders AS o
CROSS JOIN UNNEST(ARRAY[o.amount, CAST(o.qty AS DECIMAL(12, 2))]) WITH ORDINALITY AS u(figure, place)
WHERE o.order_id < 500;
CREATE TABLE single_elements (order_id BIGINT, q BIGINT, pair_text STRING)
WITH ('connector' = 'filesystem', 'path' = '${output}/single_elements', 'format' = 'csv');
INSERT INTO single_elements
SELECT order_id, ELEMENT(ARRAY[qty]), CAST(ARRAY[qty, order_id % 7] AS STRING)
FROM orders WHERE order_id < 300;
