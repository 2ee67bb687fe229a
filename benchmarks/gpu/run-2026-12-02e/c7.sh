#!/usr/bin/env bash
# Session 14, call 7: the wide kernel takes spans of up to four chunks a block (queries read and
# partials written once a span; a two-stage cp.async pipeline); rows that see nothing of a span
# write (-inf, 0) only. Selftest (spans 1, 2, 4 forced); v(n) with --wide-verify (1.5B after 256
# and 4096 tokens, 8B shape after 256); kernel times (ncu); the long prompt; exactness.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
$B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; tail -1 $OUT/selftest.txt; grep "wide att\|compaction" $OUT/selftest.txt | grep -o "max error.*\|top token.*"
ROWS=1,2,4,8,16,32,64,128,256,512,1024
for m in qwen2.5-1.5b qwen3-8b; do for p in 256 4096; do
  [ $m = qwen3-8b ] && [ $p = 4096 ] && continue
  timeout 150 $B bench --device cuda --wide-verify --costs --context 8192 --cost-prefix $p --target $S/synth-$m.gguf \
    --drafter $D --cost-rows $ROWS > $OUT/costs-$m-p$p--wide-verify.md 2>&1
  echo "== $m prefix $p --wide-verify"; grep "verify\|decode step (1" $OUT/costs-$m-p$p--wide-verify.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
done; done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for c in "1024 256" "256 4096"; do set -- $c
  TREESPEC_PROFILE_ROWS=$1 timeout 150 $NCU --profile-from-start off --clock-control none \
    --metrics gpu__time_duration.sum --csv --log-file $OUT/ncu-$1-$2.csv \
    $B bench --device cuda --wide-verify --costs --context 8192 --cost-prefix $2 --target $T --drafter $D --cost-rows $1 > /dev/null 2>&1
  echo "== ncu $1 rows prefix $2"; python3 .stage/n/ncusum.py $OUT/ncu-$1-$2.csv 2>/dev/null | head -8
done
P1="$(python3 -c "print(' '.join('def f%d(x): return x * %d + %d' % (i, i, i * 7) for i in range(120)))")"
for r in 1 2; do for w in 0 32; do
  TREESPEC_WIDE_ROWS=$w $B generate --device cuda -m $T -p "$P1" --max-tokens 8 2>&1 >/dev/null | grep -o "prompt [0-9]* tokens, prefill [0-9.]* ms" | tr '\n' ' '; echo "[wide=$w]"
done; done | tee $OUT/prefill.txt
timeout 200 $B bench --device cuda --target $T --drafter $D --limit 3 --max-tokens 64 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
tail -1 $OUT/bench-synth.log
