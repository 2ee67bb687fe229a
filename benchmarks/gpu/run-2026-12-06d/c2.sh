#!/usr/bin/env bash
# Session 26, call 2 (same machine as c1.sh): the 8B-shaped exact verify passes (issue 36) with
# the default products (kernels/mmtc.cu, warp-a-row one-row kernels since session 25) beside the
# K-quant family (TREESPEC_MMQ=1), interleaved, after 256 tokens of context.
source benchmarks/gpu/lib.sh
[ -f $S/q8b.gguf ] || $B synth --shape qwen3-8b --tokenizer-from $S/tok.gguf --out $S/q8b.gguf > /dev/null 2>&1
[ -f $S/q05t.gguf ] || $B synth --shape qwen2.5-0.5b --tokenizer-from $S/tok.gguf --out $S/q05t.gguf > /dev/null 2>&1
echo "synth at ${SECONDS}s"
for r in 1 2; do for v in 0 1; do
  TREESPEC_MMQ=$v timeout 120 $B bench --device cuda --costs --target $S/q8b.gguf --drafter $S/q05t.gguf --cost-rows 1,8,16,64,256 > $OUT/costs8b-mmq$v-r$r.md 2>&1
  echo "costs 8B mmq=$v r$r rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs8b-mmq$v-r$r.md | head -9 | cut -c1-150
done; done
