#!/usr/bin/env python3
"""What `auto` did, from a `treespec bench --json` report (plain or gzipped): per prompt, the steps
each mode ran, the cold steps, and the time against `ar`'s answer to the same prompt; then the
runs of non-`ar` steps of the prompts where `auto` lost most. Usage: auto-trace.py REPORT [WORST]."""
import gzip, json, sys

path = sys.argv[1]
worst_n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
report = json.load((gzip.open if path.endswith(".gz") else open)(path, "rt"))
for s in report["sets"]:
    modes = {m["mode"]: m for m in s["modes"]}
    if "auto" not in modes:
        continue
    ar = {p["id"]: p for p in modes["ar"]["prompts"]}
    rows = []
    for p in modes["auto"]["prompts"]:
        trace = p.get("trace", [])
        by = {}
        for st in trace:
            by[st["mode"]] = by.get(st["mode"], 0) + 1
        cold = sum(st["cold"] for st in trace)
        extra = (p["seconds"] - ar[p["id"]]["seconds"]) * 1e3
        rows.append((extra, p["id"], p["tokens"], by, cold, trace))
    total = sum(r[0] for r in rows)
    print(f"## {s['name']}: auto {total:+.1f} ms against ar over {len(rows)} answers")
    for extra, pid, tokens, by, cold, _ in rows:
        mix = " ".join(f"{k} {v}" for k, v in sorted(by.items()))
        print(f"  {pid:24} {tokens:4d} tokens {extra:+7.1f} ms  steps: {mix}  cold {cold}")
    for extra, pid, _, _, _, trace in sorted(rows, key=lambda r: -r[0])[:worst_n]:
        print(f"  worst: {pid} ({extra:+.1f} ms): step mode/drafted/tokens/us[cold]")
        line = []
        for i, st in enumerate(trace):
            if st["mode"] == "ar" and not st["cold"]:
                continue
            c = "*" if st["cold"] else ""
            line.append(f"{i}:{st['mode'][0]}{st['drafted']}/{st['tokens']}/{st['micros']}{c}")
        print("    " + " ".join(line) if line else "    (all ar)")
