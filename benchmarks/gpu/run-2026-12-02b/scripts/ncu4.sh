# Kernel times of mtp k=3 steps (4-row verify passes with the multi-row dp4a products), eager.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; H=$S/head/head.gguf
prompt="Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring."
TREESPEC_CUDA_GRAPHS=0 timeout 130 /usr/local/cuda/bin/ncu --csv --metrics gpu__time_duration.sum --launch-skip 3000 --launch-count 700 \
  --log-file $OUT/ncu4.csv $B generate --device cuda -m $T --drafter $H --mode mtp --gamma 3 -p "$prompt" --max-tokens 200 > /dev/null 2>&1
python3 - <<'PY'
import csv, os, collections
rows = list(csv.reader(open(os.environ['OUT'] + '/ncu4.csv')))
hdr = next(i for i, r in enumerate(rows) if r and r[0] == 'ID')
h = rows[hdr]; ki = h.index('Kernel Name'); vi = h.index('Metric Value'); gi = h.index('Grid Size')
seq = [(r[ki].split('(')[0], r[gi], float(r[vi].replace(',', ''))) for r in rows[hdr+1:] if len(r) > vi]
print(len(seq), 'kernels')
tot = collections.defaultdict(lambda: [0, 0.0])
for k, g, v in seq:
    tot[(k, g)][0] += 1; tot[(k, g)][1] += v
for (k, g), (n, v) in sorted(tot.items(), key=lambda x: -x[1][1])[:40]:
    print(f'{k[:40]:40} {g:>16} {n:5} {v/n:10.0f} ns {v/1e3:10.1f} us total')
PY
