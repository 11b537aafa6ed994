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
