"""Runs the coverage queries on Apache Flink 2.3 (PyFlink, local mini-cluster, streaming mode)
and writes Flink's output as expected/<sink>.<format>: the lines of the sink's part files.

    pip install apache-flink==2.3.0     # once, with Java 17
    python run_flink.py queries/*.sql

A query file is Flink SQL with `${input}` (this folder's input/) and `${output}` (where the
sinks write; each sink's path is `${output}/<name>`, a folder of part files for Flink and a
file for weir). weir runs the same files (crates/weir-cli/tests/coverage.rs).
"""
import os
import shutil
import sys
import tempfile

from pyflink.table import EnvironmentSettings, TableEnvironment

here = os.path.dirname(os.path.abspath(__file__))


def run(path):
    out = tempfile.mkdtemp()
    sql = open(path).read()
    sql = sql.replace("${input}", os.path.join(here, "input")).replace("${output}", out)
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "2")
    inserts = []
    sinks = {}
    for stmt in [s.strip() for s in sql.split(";\n")]:
        stmt = "\n".join(l for l in stmt.splitlines() if not l.strip().startswith("--")).strip()
        if not stmt:
            continue
        if stmt.upper().startswith("INSERT"):
            inserts.append(stmt)
        elif stmt.upper().startswith("SET"):
            key, value = [p.strip().strip("'") for p in stmt[3:].split("=", 1)]
            env.get_config().set(key, value)
        else:
            env.execute_sql(stmt)
            if "'path' = '" + out in stmt:
                p = stmt.split("'path' = '")[1].split("'")[0]
                fmt = stmt.split("'format' = '")[1].split("'")[0]
                sinks[p] = fmt
    ss = env.create_statement_set()
    for i in inserts:
        ss.add_insert_sql(i)
    ss.execute().wait()
    for p, fmt in sinks.items():
        lines = []
        for root, _, files in os.walk(p):
            for f in sorted(files):
                if not f.startswith("."):
                    lines.extend(open(os.path.join(root, f)).read().splitlines())
        name = os.path.basename(p)
        with open(os.path.join(here, "expected", f"{name}.{fmt}"), "w") as f:
            f.write("".join(l + "\n" for l in sorted(lines)))
        print(f"{name}: {len(lines)} rows")
    shutil.rmtree(out)


for q in sys.argv[1:]:
    run(q)
