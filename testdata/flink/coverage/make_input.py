"""Writes the coverage fixtures' input (deterministic): orders.csv, no header.

Columns: order_id, currency, amount (DECIMAL(10, 2)), qty, ts (epoch ms, UTC). 3,000 orders
over about 50 minutes of event time in 5 currencies, out of order by up to 2 s (the queries'
watermarks allow 5 s); amounts with 0, 1 and 2 decimals; some timestamps on whole seconds.
"""
import random

rng = random.Random(14)
base = 1704067200000  # 2024-01-01 00:00:00 UTC
rows = []
for i in range(3000):
    ts = base + i * 1000 + rng.choice([0, 0, 0, rng.randint(1, 999)])
    cents = rng.randint(1, 100000)
    if rng.random() < 0.2:
        cents -= cents % 100
    rows.append((i, f"C{rng.randint(0, 4)}", f"{cents // 100}.{cents % 100:02d}", rng.randint(1, 20), ts))
# arrival order: up to 2 s of disorder
rows.sort(key=lambda r: r[4] + rng.randint(0, 2000))
with open("input/orders.csv", "w") as f:
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")

# events.csv, for the text functions (queries/functions.sql), its own generator so orders.csv
# stays as it is. Columns: id, tags (comma-separated), kv (`k=v;...`), js (JSON, some of it
# broken), ds (date-time text in the forms Flink reads, and some it does not), n (an index).
# A field '-' stands for NULL (the queries use NULLIF).
rng = random.Random(10)
names = ["ada", "bob", "cy", "dee", "eve"]
texts = [
    "2024-01-31 10:00:00", "2024-1-3 1:2:3", "2024-02-30 10:00:00", "2024-01-31",
    "2024-01-31T10:00:00", "garbage", "2024-01-31 10:00:00.123", "2024-01-31 25:00:00",
    "2024-13-01 10:00:00", " 2024-01-31 10:00:00", "2024-01-31 10:00", "2023-12-31 23:59:59", "-",
]
rows = []
for i in range(60):
    tags = ",".join(rng.choice(["red", "green", "", "blue"]) for _ in range(rng.randint(1, 4)))
    kv = ";".join(f"{k}={rng.randint(0, 99)}" for k in rng.sample(["a", "b", "c"], rng.randint(0, 3)))
    shape = rng.randint(0, 5)
    user = {"name": rng.choice(names), "tier": rng.randint(1, 3)}
    if shape == 0:
        js = '{"user": {"name": "%s"}' % user["name"]  # broken
    elif shape == 1:
        js = '{"items": [], "ok": false}'
    else:
        price = rng.choice(["1.50", "2", "1e2", "-0.25", "3.0"])
        js = '{"user": {"name": "%s", "tier": %d}, "items": [%s, %d], "ok": true}' % (
            user["name"], user["tier"], price, rng.randint(0, 9))
    rows.append((i, tags or "-", kv or "-", js, texts[i % len(texts)], rng.randint(-1, 4)))
with open("input/events.csv", "w") as f:
    for r in rows:
        f.write(",".join('"' + str(x).replace('"', '""') + '"' if isinstance(x, str) and
                         any(c in x for c in ',"') else str(x) for x in r) + "\n")

# typed.csv, for the narrower types (queries/types.sql), its own generator. Columns: id, s
# (SMALLINT, to the ends of its range), t (TINYINT), d (DATE), tm (TIME, some with a fraction of a
# second, which TIME drops), tm3 (TIME(3)), ts (epoch ms).
rng = random.Random(15)
rows = []
for i in range(200):
    s = rng.choice([-32768, 32767, rng.randint(-1000, 1000)])
    t = rng.choice([-128, 127, rng.randint(-20, 20)])
    d = f"{rng.randint(1960, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    frac = rng.choice(["", "", ".5", ".123", ".040"])
    tm = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    rows.append((i, s, t, d, tm + frac, tm + frac, base + i * 1500))
with open("input/typed.csv", "w") as f:
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
# ties.csv, for rows of one key at the same event time (queries/lag_ties.sql), its own
# generator. Columns: id, k (5 keys), x, ts (whole seconds over one minute, so a key has several
# rows at most times); arrival order up to 1.5 s out of event-time order.
rng = random.Random(24)
rows = []
for i in range(400):
    k = f"k{rng.randint(0, 4)}"
    ts = base + 1000 * rng.randint(0, 60)
    rows.append((i, k, rng.randint(1, 50), ts))
rows.sort(key=lambda r: r[3] + rng.randint(0, 1500))
with open("input/ties.csv", "w") as f:
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")

# zoned.csv, for the session time zone (queries/time_zone.sql, run in America/New_York), its own
# generator. Columns: id, ts (epoch ms, every 20 minutes across both 2024 DST changes there, and
# a few others; -1 for NULL), wall (a local date-time text, in the skipped and the repeated
# hour too), d (a date text, '-' for NULL).
import datetime as _dt
spring, autumn = 1710054000000, 1730613600000  # 2024-03-10 07:00Z, 2024-11-03 06:00Z
stamps = [t + k * 1_200_000 for t in (spring, autumn) for k in range(-6, 7)]
stamps += [1704067201675, -14182940000, 0]
walls = ["2024-03-10 01:30:00", "2024-03-10 02:00:00", "2024-03-10 02:30:00",
         "2024-03-10 03:00:00", "2024-11-03 00:59:59", "2024-11-03 01:00:00",
         "2024-11-03 01:30:00", "2024-11-03 02:00:00", "2024-01-01 00:00:01.675",
         "1969-12-31 19:00:00", "2024-06-30 23:59:59"]
dates = ["2024-03-10", "2024-11-03", "2024-03-09", "-", "1969-12-31", "2024-11-04"]
with open("input/zoned.csv", "w") as f:
    for i, ts in enumerate(stamps + [None]):
        f.write(f"{i},{-1 if ts is None else ts},{walls[i % len(walls)]},{dates[i % len(dates)]}\n")

# late_*.csv: the late fixture's inputs (../late/input: 2 % of the rows 10-120 s behind the
# watermark) without their header line, which Flink's csv format cannot skip, for the batch
# queries (queries/batch.sql); events.csv only its first 12,000 rows.
for name, rows in [("clicks", None), ("impressions", None), ("events", 12000)]:
    with open(f"../late/input/{name}.csv") as f:
        lines = f.read().splitlines(True)[1:]
    with open(f"input/late_{name}.csv", "w") as f:
        f.write("".join(lines[:rows]))

# zoned_events.csv, for windows over a TIMESTAMP_LTZ in a zone with DST (queries/
# zone_windows.sql, run in America/New_York): id, key, ts (epoch ms), amount. Every 20 minutes
# (two keys) through the local days around both 2024 DST changes there (2024-03-10 has 23
# hours, 2024-11-03 25), in event-time order; then a sparse day for sessions.
spring_day, autumn_day = 1709960400000, 1730520000000  # 2024-03-09 00:00 and 2024-11-02 00:00 EST/EDT
rows = []
for start in (spring_day, autumn_day):
    for k in range(3 * 72):
        ts = start + k * 1_200_000
        rows.append((ts, "a" if k % 2 == 0 else "b", (k * 37) % 100))
# Sessions (key s; a and b, 40 minutes apart, make one per range with a 45-minute gap): rows 15 minutes apart across the start of the repeated hour of 2024-11-03
# (05:40Z, 05:55Z, 06:10Z: 01:40 EDT, 01:55 EDT, 01:10 EST), then two after gaps of over an hour.
for ts in (1730612400000, 1730613300000, 1730614200000, 1730620000000, 1730700000000):
    rows.append((ts, "s", 1))
rows.sort()
# Late rows, after the one at 06:40Z on 2024-11-03 (01:40 EST, the second pass of the repeated
# hour): 01:30 EDT and 01:10 EST fall in the local hour [01:00, 02:00), which waits for its
# second pass (kept); 00:50 EDT falls in [00:00, 01:00), which has closed (late in hourly
# windows, kept in day windows).
at = [r[0] for r in rows].index(1730616000000) + 1
# Their key is their own: a late row that falls in a session still open is merged into it by
# Flink and late by its own time in weir (a documented difference, docs/sql.md).
rows[at:at] = [(1730611800000, "l", 5), (1730614200000, "l", 6), (1730609400000, "l", 7)]
with open("input/zoned_events.csv", "w") as f:
    for i, (ts, key, amount) in enumerate(rows):
        f.write(f"{i},{key},{ts},{amount}\n")

# tagged.csv: id, tags (text of tags joined by ';', some with empty parts; `-` for an empty
# text and `none` for NULL, which the query maps, so that both engines read the same), ts. 400 rows over about 7 minutes, out of order by up to 2 s.
rng = random.Random(24)
rows = []
for i in range(400):
    ts = base + i * 1000 + rng.randint(0, 999)
    kind = rng.random()
    if kind < 0.05:
        tags = None
    elif kind < 0.1:
        tags = ""
    else:
        tags = ";".join(rng.choice(["red", "green", "blue", "", "x y"]) for _ in range(rng.randint(1, 4)))
    rows.append((i, tags, ts))
rows.sort(key=lambda r: r[2] + rng.randint(0, 2000))
with open("input/tagged.csv", "w") as f:
    for i, tags, ts in rows:
        f.write(f"{i},{'none' if tags is None else (tags or '-')},{ts}\n")
