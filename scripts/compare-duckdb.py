#!/usr/bin/env python3
"""weir against DuckDB on the three fixture queries (interval join, temporal join, window count),
whole processes, on the same CSV files; checks that every run writes the same rows.

    cargo build --release -p weir-cli
    target/release/weir gen ad-clicks --out data --rows 1000000
    target/release/weir gen fx --out data --rows 1000000 --rate-versions 20000
    target/release/weir gen hot-keys --out data --rows 2000000
    pip install duckdb                       # DuckDB's Python package
    python3 scripts/compare-duckdb.py --data data [--weir target/release/weir] [--runs 3]

For each query it runs weir in streaming mode and in batch mode (`SET
'execution.runtime-mode' = 'batch'`), both at parallelism 2, and DuckDB with 2 threads (its
ASOF JOIN for the temporal join, a range join for the interval join), each as a fresh process,
`--runs` times in turn, and prints the median wall time and CPU time (user + system, from the
operating system's accounting of the finished process) and the ratios to DuckDB. Rows are
compared as multisets, numbers normalised (DuckDB writes `1.50`, Flink and weir `1.5`); a run
that writes other rows stops the script. The data's rows are in arrival order with up to a few
seconds of disorder and no late rows, so streaming, batch and DuckDB must agree.

Measure on a quiet machine: a build beside it doubles the CPU figures.
"""
import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal, InvalidOperation

here = os.path.dirname(os.path.abspath(__file__))
queries = os.path.join(here, "..", "testdata", "flink", "queries")

DUCKDB = {
    "interval_join": """
COPY (
  SELECT c.click_id, i.impression_id, c.ad_id, i.ts AS impression_ts, c.ts AS click_ts
  FROM read_csv('{data}/clicks.csv', header = true, columns = {{
         'click_id': 'BIGINT', 'ad_id': 'BIGINT', 'user_id': 'BIGINT', 'ts': 'BIGINT'}}) c
  JOIN read_csv('{data}/impressions.csv', header = true, columns = {{
         'impression_id': 'BIGINT', 'ad_id': 'BIGINT', 'user_id': 'BIGINT', 'ts': 'BIGINT'}}) i
    ON c.ad_id = i.ad_id AND c.user_id = i.user_id AND c.ts BETWEEN i.ts AND i.ts + 10000
) TO '{out}/interval_join.csv' (HEADER)""",
    "temporal_join": """
COPY (
  SELECT o.order_id, o.currency, o.amount, r.rate, o.amount * r.rate AS converted
  FROM read_csv('{data}/orders.csv', header = true, columns = {{
         'order_id': 'BIGINT', 'currency': 'VARCHAR', 'amount': 'DECIMAL(12, 2)', 'ts': 'BIGINT'}}) o
  ASOF JOIN (
    -- Two versions of a currency at one instant: weir takes the greater row (docs/sql.md).
    SELECT currency, ts, max(rate) AS rate
    FROM read_csv('{data}/rates.csv', header = true, columns = {{
           'currency': 'VARCHAR', 'rate': 'DECIMAL(12, 6)', 'ts': 'BIGINT'}})
    GROUP BY currency, ts
  ) r
    ON o.currency = r.currency AND o.ts >= r.ts
) TO '{out}/temporal_join.csv' (HEADER)""",
    "window_count": """
COPY (
  SELECT key, (ts // 60000) * 60000 AS window_start, COUNT(*) AS cnt
  FROM read_csv('{data}/events.csv', header = true, columns = {{'key': 'VARCHAR', 'ts': 'BIGINT'}})
  GROUP BY ALL
) TO '{out}/window_count.csv' (HEADER)""",
}


def timed(cmd):
    """Runs `cmd`; returns (wall seconds, CPU seconds) of the finished process."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def normalise(value):
    try:
        d = Decimal(value)
    except InvalidOperation:
        return value
    return "0" if d == 0 else format(d.normalize(), "f")


def rows(path):
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader, None)
        return sorted(tuple(normalise(v) for v in row) for row in reader)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="folder of the generated CSV files")
    p.add_argument("--weir", default=os.path.join(here, "..", "target", "release", "weir"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--query", action="append", choices=sorted(DUCKDB), help="default: all")
    args = p.parse_args()
    try:
        import duckdb  # noqa: F401  (only to say early that it is missing)
    except ImportError:
        sys.exit("DuckDB's Python package is missing: pip install duckdb")
    data = os.path.abspath(args.data)
    work = tempfile.mkdtemp(prefix="weir-vs-duckdb-")
    print(f"{'query':<14} {'engine':<16} {'wall s':>8} {'CPU s':>8} {'wall / DuckDB':>14} {'CPU / DuckDB':>13}")
    try:
        for query in args.query or sorted(DUCKDB):
            sql = open(os.path.join(queries, f"{query}.sql")).read()
            jobs = {}
            for mode in ["streaming", "batch"]:
                job = os.path.join(work, f"{query}-{mode}.sql")
                with open(job, "w") as f:
                    f.write(f"SET 'execution.runtime-mode' = '{mode}';\n{sql}")
                out = os.path.join(work, mode)
                os.makedirs(out, exist_ok=True)
                jobs[f"weir {mode}"] = (
                    [args.weir, "run", job, "--parallelism", "2", "--var", f"input={data}",
                     "--var", f"output={out}"],
                    os.path.join(out, f"{query}.csv"),
                )
            out = os.path.join(work, "duckdb")
            os.makedirs(out, exist_ok=True)
            script = (
                "import duckdb; c = duckdb.connect(); c.execute('SET threads = 2'); "
                f"c.execute({DUCKDB[query].format(data=data, out=out)!r})"
            )
            jobs["DuckDB 2 threads"] = ([sys.executable, "-c", script], os.path.join(out, f"{query}.csv"))
            times = {name: [] for name in jobs}
            for _ in range(args.runs):
                for name, (cmd, _) in jobs.items():
                    times[name].append(timed(cmd))
            want = rows(jobs["DuckDB 2 threads"][1])
            for name, (_, path) in jobs.items():
                got = rows(path)
                if got != want:
                    sys.exit(f"{query}: {name} wrote {len(got)} rows, DuckDB {len(want)}; they differ")
            base_wall = statistics.median(t[0] for t in times["DuckDB 2 threads"])
            base_cpu = statistics.median(t[1] for t in times["DuckDB 2 threads"])
            for name in jobs:
                wall = statistics.median(t[0] for t in times[name])
                cpu = statistics.median(t[1] for t in times[name])
                print(f"{query:<14} {name:<16} {wall:>8.2f} {cpu:>8.2f} {wall / base_wall:>14.2f} {cpu / base_cpu:>13.2f}")
            print(f"{query:<14} same {len(want)} rows from every engine")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
