import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None; tot = collections.defaultdict(lambda: [0, 0.0]); n = 0
for r in rows:
    if hdr is None:
        if "Kernel Name" in r: hdr = r
        continue
    if len(r) != len(hdr): continue
    d = dict(zip(hdr, r))
    if d.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(d["Metric Value"].replace(",", ""))
    unit = d.get("Metric Unit", "")
    us = v / 1000 if unit in ("nsecond", "ns") else v * 1000 if unit in ("msecond", "ms") else v
    k = d["Kernel Name"].split("(")[0][:70]
    tot[k][0] += 1; tot[k][1] += us; n += 1
s = sum(t[1] for t in tot.values())
print(f"{n} kernels, {s:.1f} us in all")
for k, (c, us) in sorted(tot.items(), key=lambda x: -x[1][1])[:25]:
    print(f"{us:9.1f} us {100*us/s:5.1f}% {c:5d}x  {k}")
