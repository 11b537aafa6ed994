-- Issue 24 item 12: Top-N without a window, a changelog keyed by the partition and the rank:
-- over append-only rows (the best orders per currency, ranks 2 to 4, and a global Top-5), and
-- over changelogs (the most frequent quantities per currency, from a GROUP BY; the biggest of
-- each currency's latest orders per slot, from a keep-last deduplication). The state TTL
-- outlasts the input (weir's runs in event time, Flink's in processing time).
-- run_flink.py applies Flink's changelog to a table keyed by the primary key.
SET 'table.exec.state.ttl' = '365 d';
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
CREATE TABLE best_orders (currency STRING, rownum BIGINT, order_id BIGINT, amount DECIMAL(10, 2),
  PRIMARY KEY (currency, rownum) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/best_orders.db', 'table-name' = 'best_orders');
INSERT INTO best_orders
SELECT currency, rownum, order_id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency ORDER BY amount DESC, order_id) AS rownum
  FROM orders
) WHERE rownum <= 3;
CREATE TABLE runners_up (currency STRING, rownum BIGINT, order_id BIGINT, qty BIGINT,
  PRIMARY KEY (currency, rownum) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/runners_up.db', 'table-name' = 'runners_up');
INSERT INTO runners_up
SELECT currency, rownum, order_id, qty FROM (
  SELECT currency, order_id, qty,
    ROW_NUMBER() OVER (PARTITION BY currency ORDER BY qty, ts DESC, order_id) AS rownum
  FROM orders
) WHERE rownum > 1 AND rownum <= 4;
CREATE TABLE top_five (rownum BIGINT, order_id BIGINT, currency STRING, amount DECIMAL(10, 2),
  PRIMARY KEY (rownum) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/top_five.db', 'table-name' = 'top_five');
INSERT INTO top_five
SELECT rownum, order_id, currency, amount FROM (
  SELECT *, ROW_NUMBER() OVER (ORDER BY amount DESC, order_id) AS rownum FROM orders
) WHERE rownum <= 5;
CREATE VIEW per_qty AS
SELECT currency, qty, COUNT(*) AS orders FROM orders GROUP BY currency, qty;
CREATE TABLE common_quantities (currency STRING, rownum BIGINT, qty BIGINT, orders BIGINT,
  PRIMARY KEY (currency, rownum) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/common_quantities.db', 'table-name' = 'common_quantities');
INSERT INTO common_quantities
SELECT currency, rownum, qty, orders FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency ORDER BY orders DESC, qty) AS rownum
  FROM per_qty
) WHERE rownum <= 2;
CREATE VIEW latest_per_slot AS
SELECT slot, currency, amount
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY slot ORDER BY rt DESC) AS rownum
  FROM (SELECT order_id % 40 AS slot, currency, amount, rt FROM orders)
)
WHERE rownum = 1;
CREATE TABLE biggest_latest (currency STRING, rownum BIGINT, slot BIGINT, amount DECIMAL(10, 2),
  PRIMARY KEY (currency, rownum) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${output}/biggest_latest.db', 'table-name' = 'biggest_latest');
INSERT INTO biggest_latest
SELECT currency, rownum, slot, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency ORDER BY amount DESC, slot) AS rownum
  FROM latest_per_slot
) WHERE rownum <= 3;
