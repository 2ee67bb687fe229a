#!/usr/bin/env bash
# Session 14, call 5: the wide kernel over the caches' f16 shadows (cp.async, both halves in flight),
# K/V compaction of all layers in one launch. Same measurements as call 4.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
$B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep "wide\|compaction" $OUT/selftest.txt | cut -c1-260
ROWS=1,32,64,128,256,512,1024
for p in 256 4096; do
  timeout 120 $B bench --device cuda --wide-verify --costs --context 8192 \
    --cost-prefix $p --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-p$p.md 2>&1
  echo "== prefix $p"; grep "verify\|decode step (1" $OUT/costs-p$p.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for r in 256 1024; do
  TREESPEC_PROFILE_ROWS=$r timeout 150 $NCU --profile-from-start off --clock-control none \
    --metrics gpu__time_duration.sum --csv --log-file $OUT/ncu-w$r.csv \
    $B bench --device cuda --wide-verify --costs --target $T --drafter $D --cost-rows $r > /dev/null 2>&1
  echo "== ncu $r rows prefix 256"; python3 .stage/n/ncusum.py $OUT/ncu-w$r.csv 2>/dev/null | head -14
done
P1="$(python3 -c "print(' '.join('def f%d(x): return x * %d + %d' % (i, i, i * 7) for i in range(120)))")"
for r in 1 2; do for w in 0 32; do
  TREESPEC_WIDE_ROWS=$w $B generate --device cuda -m $T -p "$P1" --max-tokens 8 2>&1 >/dev/null | grep -o "prompt [0-9]* tokens, prefill [0-9.]* ms" | tr '\n' ' '; echo "[wide=$w]"
done; done | tee $OUT/prefill.txt
timeout 200 $B bench --device cuda --target $T --drafter $D --limit 3 --max-tokens 64 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
grep "^| \(ar\|linear\|tree\)" $OUT/bench-synth.log | awk -F"|" "{print \$2, \$3, \$4}"
tail -1 $OUT/bench-synth.log
