-- Issue 14 item 8: legacy group-window syntax (TUMBLE/HOP/SESSION in GROUP BY with the _START/_END/_ROWTIME helpers).
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(10, 2), qty BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${input}/orders.csv', 'format' = 'csv');
-- TUMBLE_ROWTIME is TIMESTAMP_LTZ(3) here (rt is), written to a TIMESTAMP(3) column: the window end minus 1 ms.
CREATE TABLE group_tumble (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  window_rowtime TIMESTAMP(3), n BIGINT, amount DECIMAL(38, 2))
WITH ('connector' = 'filesystem', 'path' = '${output}/group_tumble', 'format' = 'csv');
CREATE TABLE group_hop (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT, qty BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/group_hop', 'format' = 'csv');
-- Same 15-second gap as session_partition.sql, so the rows should agree with sessions_by_currency.
CREATE TABLE group_session (currency STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${output}/group_session', 'format' = 'csv');
INSERT INTO group_tumble
SELECT currency, TUMBLE_START(rt, INTERVAL '1' MINUTE), TUMBLE_END(rt, INTERVAL '1' MINUTE),
  TUMBLE_ROWTIME(rt, INTERVAL '1' MINUTE), COUNT(*), SUM(amount)
FROM orders
GROUP BY TUMBLE(rt, INTERVAL '1' MINUTE), currency;
INSERT INTO group_hop
SELECT currency, HOP_START(rt, INTERVAL '30' SECOND, INTERVAL '2' MINUTE),
  HOP_END(rt, INTERVAL '30' SECOND, INTERVAL '2' MINUTE), COUNT(*), SUM(qty)
FROM orders
GROUP BY HOP(rt, INTERVAL '30' SECOND, INTERVAL '2' MINUTE), currency;
INSERT INTO group_session
SELECT currency, SESSION_START(rt, INTERVAL '15' SECOND), SESSION_END(rt, INTERVAL '15' SECOND), COUNT(*)
FROM orders
GROUP BY SESSION(rt, INTERVAL '15' SECOND), currency;
