#!/usr/bin/env python3
"""Writes a job of N INSERTs, each over a source table of its own (a one-second tumbling count
per key), and its input, into a folder: what docs/sql.md measured planning, running and a
SIGTERM on ("There is no limit on the number of INSERTs").

    python3 scripts/statement-set.py 2000 /tmp/many [ROWS]
    weir explain /tmp/many/job.sql > /dev/null          # planning time
    cd /tmp/many && weir run job.sql --http off        # run; SIGTERM it to time the stop
"""
import os
import sys

n = int(sys.argv[1])
out = sys.argv[2]
rows = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "in.csv"), "w") as f:
    f.write("".join(f"k{i % 100},{i}\n" for i in range(rows)))
lines = []
for i in range(n):
    lines.append(
        f"CREATE TABLE t{i} (k STRING, v BIGINT, ts AS TO_TIMESTAMP_LTZ(v, 3), "
        f"WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) "
        f"WITH ('connector' = 'filesystem', 'path' = 'in.csv', 'format' = 'csv');"
    )
    lines.append(
        f"CREATE TABLE o{i} (k STRING, c BIGINT) "
        f"WITH ('connector' = 'filesystem', 'path' = 'out/o{i}.csv', 'format' = 'csv');"
    )
for i in range(n):
    lines.append(
        f"INSERT INTO o{i} SELECT k, COUNT(*) FROM TABLE(TUMBLE(TABLE t{i}, DESCRIPTOR(ts), "
        f"INTERVAL '1' SECOND)) GROUP BY k, window_start, window_end;"
    )
with open(os.path.join(out, "job.sql"), "w") as f:
    f.write("\n".join(lines) + "\n")
