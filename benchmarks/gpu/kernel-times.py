#!/usr/bin/env python3
"""Sum an `ncu --csv --metrics gpu__time_duration.sum` log per kernel name: where a step's GPU time
goes. Usage: kernel-times.py LOG [STEPS] (STEPS: decode steps the log covers, to print per step)."""
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
head = rows[0]
name_i, val_i, unit_i = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
tot = collections.Counter(); cnt = collections.Counter()
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
for r in rows[1:]:
    try:
        v = float(r[val_i].replace(",", "")) * scale.get(r[unit_i], 1.0)
    except ValueError:
        continue
    k = r[name_i].split("(")[0][:60]
    tot[k] += v; cnt[k] += 1
steps = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
print(f"{'kernel':60} {'calls':>7} {'us total':>10} {'us/call':>8}")
for k, v in tot.most_common():
    print(f"{k:60} {cnt[k]:7d} {v:10.1f} {v / cnt[k]:8.2f}")
print(f"all kernels: {sum(cnt.values())} launches, {sum(tot.values()):.1f} us; per step {sum(tot.values()) / steps:.1f} us")
