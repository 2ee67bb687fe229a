#!/usr/bin/env bash
# Session 13, call 6: the wide products with q/k/v and gate/up copied back to back (one
# conversion and one GEMM for each): selftest, v(n) with --wide-verify on the 1.5B and 8B shapes,
# the 3,861-token prompt.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
$B selftest --device cuda > $OUT/selftest.txt 2>&1; tail -1 $OUT/selftest.txt; grep "wide" $OUT/selftest.txt
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
for m in qwen2.5-1.5b; do
  timeout 100 $B bench --device cuda --wide-verify --costs --target $S/synth-$m.gguf --drafter $D \
    --cost-rows 1,16,32,64,128,256,1024 > $OUT/costs-$m.md 2>&1
  echo "== $m"; grep "verify\|decode step (1" $OUT/costs-$m.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
P1="$(python3 -c "print(' '.join('def f%d(x): return x * %d + %d' % (i, i, i * 7) for i in range(120)))")"
for w in 0 32 0 32; do
  TREESPEC_WIDE_ROWS=$w $B generate --device cuda -m $T -p "$P1" --max-tokens 8 2>&1 >/dev/null | grep -o "prompt [0-9]* tokens, prefill [0-9.]* ms" | tr '\n' ' '; echo "[wide=$w]"
done | tee $OUT/prefill.txt
