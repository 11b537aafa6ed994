#!/usr/bin/env python3
"""Measures `weir run --group`: the throughput of 1, 2 and 3 members, and the takeover after a
member is killed with -9 (from the kill to the moved tasks' first committed rows).

Needs a Kafka-protocol broker, a PostgreSQL server, `psql`, and the Python package
confluent-kafka (`pip install confluent-kafka`):

    scripts/group-bench.py --weir target/release/weir --bootstrap 127.0.0.1:9092 \\
        --postgres postgresql://postgres@127.0.0.1:5432/postgres [--records 60000] \\
        [--members 1,2,3] [--rekey] [--alone] [--no-takeover] \
        [--checkpoints s3://bucket/prefix --lease '3 s'] [--reread]

The job is a filter and a projection from a 6-partition topic into a PostgreSQL table, exactly
once per task, checkpoints every 300 ms. With --rekey the table has a primary key (`id`), so
every row is re-keyed by it on its way to the table: in a group through a repartition topic
(two stages of six tasks), in a job run alone through its in-process exchange. Throughput is
whole processes: from the members' start to the last row committed, and the CPU the members
used (from /proc). With --alone the same job also runs as a single process, bounded (it reads
the records there at start and ends), at parallelism 1. On a machine where the broker shares
the cores, the broker's serving is part of what is measured. With --checkpoints the group keeps
its checkpoints and its members in object storage (each run under its own prefix), where a
killed member's tasks move once its leases (--lease) have run out. With --reread the job also
runs into a Kafka topic (an at-least-once sink) with one member killed, and the rows written
twice, the rows the moved tasks read again, are counted.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

try:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError:
    sys.exit("needs the Python package confluent-kafka: pip install confluent-kafka")

PARTITIONS = 6


def psql(url, sql):
    out = subprocess.run(["psql", url, "-Atc", sql], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return out.stdout.strip()


def create_topic(bootstrap, name):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _, f in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).items():
        f.result()


def produce(bootstrap, topic, start, count, per_second=0):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    t0 = time.monotonic()
    for i in range(start, start + count):
        rec = {"id": i, "user_id": i % 97, "amount": (i * 7919) % 1000, "ts": 1_700_000_000_000 + i * 10}
        while True:
            try:
                p.produce(topic, key=str(i % 97), value=json.dumps(rec), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if (i - start) % 500 == 0:
            p.poll(0)
            if per_second:
                due = t0 + (i - start) / per_second - time.monotonic()
                if due > 0:
                    time.sleep(due)
    p.flush()


def job(bootstrap, topic, url, table, checkpoints, rekey=False, bounded=False, lease=None):
    key = ", PRIMARY KEY (id) NOT ENFORCED" if rekey else ""
    end = ", 'scan.bounded.mode' = 'latest-offset'" if bounded else ""
    lease = f"SET 'weir.checkpointing.lock-lease' = '{lease}';" if lease else ""
    return f"""
SET 'execution.checkpointing.interval' = '300 ms';
SET 'execution.checkpointing.dir' = '{checkpoints}';
{lease}
CREATE TABLE events (id BIGINT, user_id BIGINT, amount BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
        'properties.group.id' = '{topic}-offsets', 'scan.startup.mode' = 'earliest-offset',
        'format' = 'json'{end});
CREATE TABLE big (id BIGINT, user_id BIGINT, doubled BIGINT{key})
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{table}');
INSERT INTO big SELECT id, user_id, amount * 2 FROM events WHERE amount > 500;
"""


def location(args, stamp, name):
    """Where a run's checkpoints go: a folder of its own, or a prefix under --checkpoints."""
    return f"{args.checkpoints.rstrip('/')}/{stamp}-{name}" if args.checkpoints else "checkpoints"


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def start_members(weir, folder, group, n, logs):
    members = []
    for k in range(n):
        log = open(os.path.join(folder, f"m{k}.log"), "w")
        logs.append(log.name)
        members.append(subprocess.Popen(
            [weir, "run", "job.sql", "--group", group, "--http", "off"],
            cwd=folder, stdout=subprocess.DEVNULL, stderr=log))
    return members


def expected(records):
    return sum(1 for i in range(records) if (i * 7919) % 1000 > 500)


def prepared(args, stamp, name):
    """A topic holding the records, and the table the job fills: their names and its rows."""
    topic = f"gb-{stamp}-{name}"
    create_topic(args.bootstrap, topic)
    produce(args.bootstrap, topic, 0, args.records)
    return topic, f"gb_{stamp}_{name}", expected(args.records)


def table_row(args, label, want, wall, cpu, dup):
    print(f"| {label} | {args.records:,} | {want:,} | {wall:.2f} | {cpu:.2f} | "
          f"{args.records / wall:,.0f} | {args.records / max(cpu, 1e-9):,.0f} | {dup} |")


def alone(args, stamp):
    topic, table, want = prepared(args, stamp, "alone")
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "job.sql"), "w") as f:
            f.write(job(args.bootstrap, topic, args.postgres, table,
                        location(args, stamp, "alone"), args.rekey, True, args.lease))
        t0 = time.monotonic()
        p = subprocess.Popen([args.weir, "run", "job.sql", "--http", "off"], cwd=folder,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, _, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        cpu = usage.ru_utime + usage.ru_stime
        got = int(psql(args.postgres, f"SELECT count(*) FROM {table}") or 0)
        dup = psql(args.postgres, f"SELECT count(*) - count(DISTINCT id) FROM {table}")
    if got != want:
        sys.exit(f"alone: {got} rows of {want}")
    table_row(args, "alone", want, wall, cpu, dup)


def throughput(args, members, stamp):
    topic, table, want = prepared(args, stamp, members)
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "job.sql"), "w") as f:
            f.write(job(args.bootstrap, topic, args.postgres, table,
                        location(args, stamp, members), args.rekey, lease=args.lease))
        logs = []
        t0 = time.monotonic()
        ms = start_members(args.weir, folder, topic, members, logs)
        got = 0
        cpu = 0.0
        while got < want:
            time.sleep(0.05)
            cpu = sum(cpu_seconds(m.pid) for m in ms)
            got = int(psql(args.postgres, f"SELECT count(*) FROM {table}") or 0)
            if time.monotonic() - t0 > 600:
                sys.exit(f"{members} members: {got} of {want} rows after 600 s")
        wall = time.monotonic() - t0
        for m in ms:
            m.send_signal(signal.SIGTERM)
        for m in ms:
            m.wait()
        dup = psql(args.postgres, f"SELECT count(*) - count(DISTINCT id) FROM {table}")
    table_row(args, members, want, wall, cpu, dup)


def takeover(args, stamp):
    topic = f"gb-{stamp}-takeover"
    table = f"gb_{stamp}_takeover"
    create_topic(args.bootstrap, topic)
    rate, seconds = args.rate, args.seconds
    total = rate * seconds
    producer = threading.Thread(target=produce, args=(args.bootstrap, topic, 0, total, rate))
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "job.sql"), "w") as f:
            f.write(job(args.bootstrap, topic, args.postgres, table,
                        location(args, stamp, "takeover"), args.rekey, lease=args.lease))
        logs = []
        producer.start()
        produced_from = time.monotonic()
        ms = start_members(args.weir, folder, topic, 3, logs)

        def held(log):
            tasks = set()
            for line in open(log):
                if line.startswith("weir: task "):
                    n, what = line[len("weir: task "):].split(": ", 1)
                    n = int(n.split(" ")[0])
                    if what.startswith(("started", "took over")):
                        tasks.add(n)
                    elif what.startswith("handed back"):
                        tasks.discard(n)
            return tasks

        t0 = time.monotonic()
        tasks = 2 * PARTITIONS if args.rekey else PARTITIONS
        while not all(len(held(l)) == tasks // 3 for l in logs):
            time.sleep(0.05)
            if time.monotonic() - t0 > 120:
                sys.exit("the members did not settle on two tasks each")
        time.sleep(args.seconds / 3)
        moved = held(logs[0])
        # The rows of the partitions whose reading tasks moved (with --rekey, they also pass a
        # repartition topic and the tasks that write the table, some of which may have moved).
        read = sorted(t for t in moved if t < PARTITIONS) or list(range(PARTITIONS))
        cond = " OR ".join(f"id % {PARTITIONS} = {t}" for t in read)
        before = int(psql(args.postgres, f"SELECT coalesce(max(id), -1) FROM {table} WHERE {cond}"))
        ms[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        if args.rekey:
            # Rows written before the kill may still reach the table through tasks that did not
            # move (a repartition topic holds them until their writer's commit): count only
            # records produced after the kill (ids by the producer's pace, and 0.1 s more).
            before = int((killed - produced_from + 0.1) * rate)
        ms[0].wait()
        said = first_row = None
        while said is None or first_row is None:
            time.sleep(0.01)
            now = time.monotonic()
            if said is None and all(
                any(line.startswith((f"weir: task {t}:", f"weir: task {t} (")) and "took over" in line
                    for l in logs[1:] for line in open(l))
                for t in moved
            ):
                said = now - killed
            if first_row is None:
                top = int(psql(args.postgres, f"SELECT coalesce(max(id), -1) FROM {table} WHERE {cond}"))
                if top > before:
                    first_row = now - killed
            if now - killed > 120:
                sys.exit("no takeover within 120 s")
        producer.join()
        want = expected(total)
        while int(psql(args.postgres, f"SELECT count(*) FROM {table}") or 0) < want:
            time.sleep(0.1)
        for m in ms[1:]:
            m.send_signal(signal.SIGTERM)
        for m in ms[1:]:
            m.wait()
        dup = psql(args.postgres, f"SELECT count(*) - count(DISTINCT id) FROM {table}")
        restored = [line.strip() for l in logs[1:] for line in open(l) if "took over from" in line]
    print(f"killed a member holding tasks {sorted(moved)} at {rate:,} records/s: the others said "
          f"they took them over after {said:.2f} s; their first new rows committed after "
          f"{first_row:.2f} s; duplicates {dup}")
    for r in restored[-len(moved):]:
        print(f"  {r}")


def reread(args, stamp):
    """Rows read again after a takeover: the stateless job into a Kafka topic (an at-least-once
    sink, which writes again what a moved task reads again), three members, one killed with -9
    once each runs two tasks; the output's ids counted once everything is through."""
    from confluent_kafka import Consumer, TopicPartition
    topic, out = f"gb-{stamp}-reread", f"gb-{stamp}-reread-out"
    create_topic(args.bootstrap, topic)
    create_topic(args.bootstrap, out)
    rate, total = args.rate, args.rate * args.seconds
    sql = job(args.bootstrap, topic, args.postgres, "unused", location(args, stamp, "reread"),
              lease=args.lease)
    sql = sql.replace(
        "CREATE TABLE big (id BIGINT, user_id BIGINT, doubled BIGINT)\n"
        f"WITH ('connector' = 'jdbc', 'url' = '{args.postgres}', 'table-name' = 'unused');",
        "CREATE TABLE big (id BIGINT, user_id BIGINT, doubled BIGINT)\n"
        f"WITH ('connector' = 'kafka', 'topic' = '{out}', "
        f"'properties.bootstrap.servers' = '{args.bootstrap}', 'format' = 'json');")
    assert "'connector' = 'kafka', 'topic' = '" + out in sql, sql
    producer = threading.Thread(target=produce, args=(args.bootstrap, topic, 0, total, rate))
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "job.sql"), "w") as f:
            f.write(sql)
        logs = []
        producer.start()
        ms = start_members(args.weir, folder, topic, 3, logs)
        t0 = time.monotonic()
        while not all(sum(1 for line in open(l) if line.startswith("weir: task ")
                          and ("started" in line or "took over" in line)) >= 2 for l in logs):
            time.sleep(0.05)
            if time.monotonic() - t0 > 120:
                sys.exit("the members did not settle on two tasks each")
        time.sleep(args.seconds / 3)
        ms[0].send_signal(signal.SIGKILL)
        ms[0].wait()
        producer.join()
        want = expected(total)
        c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"{out}-count",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.assign([TopicPartition(out, p, 0) for p in range(PARTITIONS)])
        seen, ids, quiet = 0, set(), time.monotonic()
        while len(ids) < want or time.monotonic() - quiet < 5:
            m = c.poll(0.5)
            if m is None or m.error():
                if time.monotonic() - quiet > 120:
                    sys.exit(f"{len(ids)} of {want} rows after 120 s without new ones")
                continue
            seen += 1
            ids.add(json.loads(m.value())["id"])
            quiet = time.monotonic()
        c.close()
        for m in ms[1:]:
            m.send_signal(signal.SIGTERM)
        for m in ms[1:]:
            m.wait()
    print(f"rows read again after a kill at {rate:,} records/s (an at-least-once Kafka sink): "
          f"{seen - len(ids):,} of {len(ids):,} rows written twice")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--postgres", required=True)
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--members", default="1,2,3")
    ap.add_argument("--rate", type=int, default=3_000, help="records/s in the takeover run")
    ap.add_argument("--seconds", type=int, default=15, help="length of the takeover run")
    ap.add_argument("--rekey", action="store_true", help="re-key every row by id (upsert table)")
    ap.add_argument("--alone", action="store_true", help="also run the job as a single process")
    ap.add_argument("--no-takeover", action="store_true", help="leave the takeover run out")
    ap.add_argument("--checkpoints", help="a prefix in object storage (s3://bucket/prefix) for the "
                    "checkpoints and the members, each run under its own; the AWS_* variables "
                    "reach it (default: a local folder per run)")
    ap.add_argument("--lease", help="weir.checkpointing.lock-lease (e.g. '3 s')")
    ap.add_argument("--reread", action="store_true", help="also count the rows read again after "
                    "a takeover, through an at-least-once Kafka sink")
    args = ap.parse_args()
    stamp = int(time.time())
    print("| members | records | rows out | wall s | members' CPU s | records/s | records per CPU-second | duplicates |")
    print("|---|---|---|---|---|---|---|---|")
    if args.alone:
        alone(args, stamp)
    for n in (int(x) for x in args.members.split(",") if x):
        throughput(args, n, stamp)
    if not args.no_takeover:
        takeover(args, stamp)
    if args.reread:
        reread(args, stamp)


if __name__ == "__main__":
    main()
