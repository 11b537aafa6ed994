"""Runs the coverage queries on Apache Flink 2.3 (PyFlink, local mini-cluster, streaming mode, or
batch mode for a query that sets 'execution.runtime-mode' = 'batch')
and writes Flink's output as expected/<sink>.<format>: the lines of the sink's part files.

    pip install apache-flink==2.3.0     # once, with Java 17
    python run_flink.py queries/*.sql

A query file is Flink SQL with `${input}` (this folder's input/) and `${output}` (where the
sinks write; each sink's path is `${output}/<name>`, a folder of part files for Flink and a
file for weir). weir runs the same files (crates/weir-cli/tests/coverage.rs).

A sink of updates is a 'jdbc' table with a PRIMARY KEY and the URL
'jdbc:sqlite:${output}/<name>.db' (weir writes it; this Flink has no JDBC connector): here
its INSERT's SELECT is collected from Flink as a changelog, applied to a table keyed by the
primary key, and the final table is written as expected/<name>.csv.
"""
import csv
import io
import re
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
    # Flink takes the runtime mode when the environment is made, not from a SET.
    batch = re.search(r"SET 'execution.runtime-mode' = 'batch'", sql) is not None
    env = TableEnvironment.create(
        EnvironmentSettings.in_batch_mode() if batch else EnvironmentSettings.in_streaming_mode()
    )
    env.get_config().set("parallelism.default", "2")
    inserts = []
    sinks = {}
    upsert_sinks = {}  # table name -> (output name, key column positions)
    for stmt in [s.strip() for s in sql.split(";\n")]:
        stmt = "\n".join(l for l in stmt.splitlines() if not l.strip().startswith("--")).strip()
        if not stmt:
            continue
        if stmt.upper().startswith("INSERT"):
            target = stmt.split()[2].lower()
            if target in upsert_sinks:
                name, key = upsert_sinks[target]
                query = stmt.split(None, 3)[3]
                collect_upserts(env, query, key, name)
            else:
                inserts.append(stmt)
        elif stmt.upper().startswith("SET"):
            key, value = [p.strip().strip("'") for p in stmt[3:].split("=", 1)]
            if key != "execution.runtime-mode":
                env.get_config().set(key, value)
        elif "'url' = 'jdbc:sqlite:" + out + "/" in stmt:
            table = stmt.split()[2].lower()
            name = stmt.split("'url' = 'jdbc:sqlite:" + out + "/")[1].split(".db'")[0]
            columns = [c.strip().split()[0].lower() for c in stmt.split("(", 1)[1].split(",")
                       if not c.strip().upper().startswith(("PRIMARY", "WATERMARK"))]
            pk = re.search(r"PRIMARY KEY \(([^)]*)\)", stmt).group(1)
            key = [columns.index(k.strip().lower()) for k in pk.split(",")]
            upsert_sinks[table] = (name, key)
        else:
            env.execute_sql(stmt)
            if "'path' = '" + out in stmt:
                p = stmt.split("'path' = '")[1].split("'")[0]
                fmt = stmt.split("'format' = '")[1].split("'")[0]
                sinks[p] = fmt
    if inserts:
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


def collect_upserts(env, query, key, name):
    """Runs `query`, applies its changelog to a table keyed by the columns at `key`, and writes
    the final rows as expected/<name>.csv."""
    from pyflink.common import RowKind
    table = {}
    with env.execute_sql(query).collect() as results:
        for row in results:
            k = tuple(row[i] for i in key)
            if row.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
                table[k] = row
            else:
                table.pop(k, None)
    lines = []
    for row in table.values():
        out = io.StringIO()
        values = ["" if v is None else str(v).lower() if isinstance(v, bool) else v for v in row]
        csv.writer(out, lineterminator="").writerow(values)
        lines.append(out.getvalue())
    with open(os.path.join(here, "expected", f"{name}.csv"), "w") as f:
        f.write("".join(l + "\n" for l in sorted(lines)))
    print(f"{name}: {len(lines)} rows (final table)")


for q in sys.argv[1:]:
    run(q)
