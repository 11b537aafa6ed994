"""Evaluates each expression of expressions.txt on Apache Flink 2.3 (PyFlink, batch mode) as
`CAST((expr) AS STRING)` over one row, and writes expected.tsv: the expression, a tab, and
Flink's text, `NULL`, or `ERROR` when Flink refuses the query or fails the job.

    pip install apache-flink==2.3.0     # once, with Java 17
    python run_flink.py

weir evaluates the same expressions (crates/weir-sql/tests/flink_scalars.rs).
"""
import os
import sys

from pyflink.table import EnvironmentSettings, TableEnvironment

here = os.path.dirname(os.path.abspath(__file__))


def main():
    t = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t.get_config().set("parallelism.default", "1")
    t.get_config().set("table.local-time-zone", "UTC")
    # A NULL result of an expression Flink types NOT NULL would fail the collect otherwise.
    t.get_config().set("table.exec.sink.not-null-enforcer", "DROP")
    out = []
    for line in open(os.path.join(here, "expressions.txt")):
        e = line.strip()
        if not e or e.startswith("#"):
            continue
        try:
            r = t.execute_sql(f"SELECT CAST(({e}) AS STRING) FROM (VALUES (1)) AS v(dummy)")
            rows = [tuple(x) for x in r.collect()]
            v = rows[0][0] if rows else None
            text = "NULL" if v is None else v
        except Exception as ex:
            lines = [l for l in str(ex).split("\n") if "Exception" in l]
            print(e, "->", (lines[-1] if lines else str(ex))[:200], file=sys.stderr)
            text = "ERROR"
        assert "\t" not in text and "\n" not in text, (e, text)
        out.append(f"{e}\t{text}")
        print(out[-1])
    with open(os.path.join(here, "expected.tsv"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
