# Session 31: issue 36 item 3, `tree` against `linear` at the 8B and 32B shapes, budgets 8-256
# (BENCHMARKS.md section 46). A projection, not a measurement: python3 project-8b-32b.py
#
# 8B: the K-quant family's passes measured on an H100 (section 41, ms: 8-256 rows), its one-row
# step after section 44's one-row kernel (generate --mode ar 297.3 tok/s -> 3.36 ms), the 0.5B
# drafter's step 0.87 ms (section 41). 32B: no file was run; its passes are taken as the 8B's in
# target steps (its weights are 4.2x the 8B's bytes and its tile work 4.2x the flops, while its
# attention grows only 1.8x: so the 8B's figures are an upper bound in steps), and its step as
# 4.2x the 8B's. Tau: section 33, the default pair (drafter 0.5B), HumanEval and chat; trees of
# 64+ nodes given the 32-node tree's tau (it had stopped growing: upper bounds).
def interp(x, xs, ys):
    for (a, ya), (b, yb) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if a <= x <= b:
            return ya + (yb - ya) * (x - a) / (b - a)
    return ys[-1] if x > xs[-1] else ys[0]

passes_8b = {1: 3.845, 8: 4.575, 16: 5.84, 64: 12.85, 256: 44.41}  # ms, section 41
step_8b = 1000 / 297.3                                              # ms, section 44
# Passes in the step they were measured against (section 41's 3.845 ms).
v_steps = {r: ms / passes_8b[1] for r, ms in passes_8b.items()}
draft = 0.87  # ms, 0.5B drafter step
shapes = {"8B": step_8b, "32B": step_8b * 4.2}
tau = {  # (drafter steps, verify rows, tau HumanEval, tau chat)
    "linear γ4": (4, 5, 4.76, 3.03), "linear γ7": (7, 8, 7.22, 3.47),
    "tree B8": (8, 9, 8.04, 4.20), "tree B16": (8, 17, 8.18, 4.34), "tree B32": (8, 33, 8.18, 4.38),
    "tree B64": (8, 65, 8.18, 4.38), "tree B128": (8, 129, 8.18, 4.38), "tree B256": (8, 257, 8.18, 4.38),
}
xs = sorted(v_steps)
rows_out = {}
for shape, step in shapes.items():
    for m, (L, rows, th, tc) in tau.items():
        # The verify pass scaled to this build's step (the one-row kernel is now 13% faster;
        # the tiles are not): the multi-row passes keep their measured milliseconds at 8B.
        v = interp(rows, xs, [v_steps[x] for x in xs]) * passes_8b[1] / step_8b
        r = L * draft / step + v  # in target steps
        rows_out.setdefault(m, []).append((rows, r, th / r, tc / r))
print("| mode | verify rows | 8B: round (steps) | HumanEval | chat | 32B: round (steps) | HumanEval | chat |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for m, vals in rows_out.items():
    (rows, r8, h8, c8), (_, r32, h32, c32) = vals
    print(f"| `{m}` | {rows} | {r8:.2f} | {h8:.2f}x | {c8:.2f}x | {r32:.2f} | {h32:.2f}x | {c32:.2f}x |")
best = lambda i, k: max(v[i][k] for m, v in rows_out.items() if m.startswith("linear"))
for i, shape in enumerate(shapes):
    bt = [max(v[i][2] for m, v in rows_out.items() if m.startswith("tree")),
          max(v[i][3] for m, v in rows_out.items() if m.startswith("tree"))]
    print(f"{shape}: best tree / best linear: HumanEval {bt[0] / best(i, 2):.2f}, chat {bt[1] / best(i, 3):.2f}")
