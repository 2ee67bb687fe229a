#!/usr/bin/env bash
# Session 13, call 4: prompt passes through cuBLAS by default, verify passes only with
# --wide-verify. Selftest; v(n) both ways (1.5B, 8B shapes); prefill of long prompts with the
# wide products off and on, interleaved; greedy exactness of big trees on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
$B selftest --device cuda > $OUT/selftest.txt 2>&1; tail -1 $OUT/selftest.txt; grep -c . $OUT/selftest.txt
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
ROWS=1,2,4,8,16,32,64,128,256,512,1024
for m in qwen2.5-1.5b qwen3-8b; do
  for f in "" --wide-verify; do
    timeout 150 $B bench --device cuda $f --costs --target $S/synth-$m.gguf --drafter $D \
      --cost-rows $ROWS > $OUT/costs-$m$f.md 2>&1
    echo "== $m $f"; grep -v "^$" $OUT/costs-$m$f.md | head -1 | cut -c1-200; grep "verify\|decode step (1" $OUT/costs-$m$f.md | awk -F'|' '{print $3, $5}' | tr '\n' ';'; echo
  done
done
P1="$(python3 -c "print(' '.join('def f%d(x): return x * %d + %d' % (i, i, i * 7) for i in range(120)))")"
P3="$(python3 -c "print(' '.join('def f%d(x): return x * %d + %d' % (i, i, i * 7) for i in range(400)))")"
for r in 1 2; do for w in 0 32; do for p in P1 P3; do
  TREESPEC_WIDE_ROWS=$w $B generate --device cuda -m $T -p "${!p}" --max-tokens 8 2>&1 >/dev/null | grep -o "prompt [0-9]* tokens, prefill [0-9.]* ms" | tr '\n' ' '; echo "[wide=$w $p]"
done; done; done | tee $OUT/prefill.txt
timeout 200 $B bench --device cuda --target $T --drafter $D --limit 3 --max-tokens 64 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
grep "^| \(ar\|linear\|tree\)" $OUT/bench-synth.log | awk -F'|' '{print $2, $3, $5, $14}'; tail -1 $OUT/bench-synth.log
