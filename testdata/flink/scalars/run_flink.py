"""Evaluates each expression of expressions.txt on Apache Flink 2.3 (PyFlink, batch mode) as
`CAST((expr) AS STRING)` over one row, in UTC, and writes expected.tsv: the expression, a tab,
and Flink's text, `NULL`, or `ERROR` when Flink refuses the query or fails the job. Then each
expression of zone_expressions.txt in every zone of ZONES, into zone_expected.tsv (the zone, a
tab, the expression, a tab, the text).

    pip install apache-flink==2.3.0     # once, with Java 17
    python run_flink.py                 # both files
    python run_flink.py zones           # zone_expected.tsv only
    python run_flink.py new             # only the expressions neither file has yet

weir evaluates the same expressions (crates/weir-sql/src/functions/flink_scalars.rs).
"""
import os
import sys

from pyflink.table import EnvironmentSettings, TableEnvironment

here = os.path.dirname(os.path.abspath(__file__))


# A zone with DST (New York), one with a half-hour offset (Kolkata), and a fixed offset.
ZONES = ["America/New_York", "Asia/Kolkata", "GMT-03:30"]


def expressions(name):
    for line in open(os.path.join(here, name)):
        e = line.strip()
        if e and not e.startswith("#"):
            yield e


def evaluate(t, e):
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
    return text


def environment(zone):
    t = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t.get_config().set("parallelism.default", "1")
    t.get_config().set("table.local-time-zone", zone)
    # A NULL result of an expression Flink types NOT NULL would fail the collect otherwise.
    t.get_config().set("table.exec.sink.not-null-enforcer", "DROP")
    return t


def write(name, out):
    with open(os.path.join(here, name), "w") as f:
        f.write("\n".join(out) + "\n")


def known(name):
    """What a file of expected texts holds: its lines by all but the last column."""
    if not os.path.exists(os.path.join(here, name)):
        return {}
    lines = open(os.path.join(here, name)).read().splitlines()
    return {tuple(l.split("\t")[:-1]): l for l in lines if l}


def main():
    mode = sys.argv[1] if sys.argv[1:] else "all"
    if mode in ("all", "new"):
        have = known("expected.tsv") if mode == "new" else {}
        t = environment("UTC")
        out = []
        for e in expressions("expressions.txt"):
            out.append(have.get((e,)) or f"{e}\t{evaluate(t, e)}")
            print(out[-1])
        write("expected.tsv", out)
    have = known("zone_expected.tsv") if mode == "new" else {}
    out = []
    for zone in ZONES:
        t = environment(zone)
        for e in expressions("zone_expressions.txt"):
            out.append(have.get((zone, e)) or f"{zone}\t{e}\t{evaluate(t, e)}")
            print(out[-1])
    write("zone_expected.tsv", out)


if __name__ == "__main__":
    main()
