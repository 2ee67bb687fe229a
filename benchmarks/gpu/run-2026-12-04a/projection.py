# Session 20: the projection table of BENCHMARKS.md section 35 (the 8B shape), from calls 1-2
# costs and section 33 taus: python3 projection.py
def interp(x, xs, ys):
    for (a, ya), (b, yb) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if a <= x <= b: return ya + (yb - ya) * (x - a) / (b - a)
    return ys[-1] if x > xs[-1] else ys[0]
# 8B-shaped target (synthetic, H200, after 256 tokens), ms: session 20 calls 1-2
costs = {
 "mmtc (default)": {1:3.34, 8:8.73, 16:10.74, 64:24.74, 256:83.8},
 "mmq (TREESPEC_MMQ=1)": {1:3.80, 8:5.11, 16:6.27, 64:17.95, 256:49.12},
}
draft = 0.86   # 0.5B drafter step, ms (calls 1-2)
head = None
def v(c, rows):
    xs = sorted(c); ys=[c[x] for x in xs]
    return interp(rows, xs, ys)
tau = {  # section 33, default pair: (HumanEval, chat)
 "linear γ4": (4, 5, 4.76, 3.03), "linear γ7": (7, 8, 7.22, 3.47),
 "tree B8": (8, 9, 8.04, 4.20), "tree B16": (8, 17, 8.18, 4.34), "tree B32": (8, 33, 8.18, 4.38),
 "tree B64*": (8, 65, 8.18, 4.38), "tree B128*": (8, 129, 8.18, 4.38), "tree B256*": (8, 257, 8.18, 4.38),
}
for name, c in costs.items():
    step = c[1]
    print(f"\n{name}: step {step} ms")
    print("| mode | verify rows | round, target steps | HumanEval x ar | chat x ar |")
    for m,(L,rows,th,tc) in tau.items():
        r = L*draft + v(c, rows)
        print(f"| {m} | {rows} | {r/step:.2f} | {th*step/r:.2f}x | {tc*step/r:.2f}x |")
