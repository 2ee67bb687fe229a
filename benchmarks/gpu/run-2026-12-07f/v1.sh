#!/usr/bin/env bash
# Session 35, last call (carry [".stage/bin/treespec.xz", ".stage/tok/tokenizer.gguf.xz"]): the
# products a target takes by what it is loaded for (this build: the K-quant family wherever a
# drafter or head is loaded beside it, the one-row tensor-core products for plain decoding
# alone), on the synthetic 1.5B-shaped file drafting for itself: `generate --mode ar` names its
# products; `bench` with a drafter runs the family by default and `mmtc` with TREESPEC_MMQ=0,
# every mode required to be ar's.
source benchmarks/gpu/lib.sh
[ -f $S/s15.gguf ] || $B synth --shape qwen2.5-1.5b --tokenizer-from $S/tok.gguf --out $S/s15.gguf > /dev/null
echo "synth at ${SECONDS}s"
timeout 60 $B generate -m $S/s15.gguf --device cuda --mode ar --max-tokens 128 -p "Write a sort function." 2>&1 >/dev/null | tail -1 | cut -c1-400
for mmq in "" 0; do
  TREESPEC_MMQ=$mmq timeout 100 $B bench --device cuda --target $S/s15.gguf --drafter $S/s15.gguf \
    --prompts benchmarks/prompts/humaneval.jsonl --limit 3 --max-tokens 128 --modes ar,linear:3@0 \
    --require-identical > $OUT/bench-mmq$mmq.md 2>&1
  echo "== TREESPEC_MMQ=$mmq rc=$? at ${SECONDS}s"; head -c 300 $OUT/bench-mmq$mmq.md; echo; grep "^| ar \|^| linear" $OUT/bench-mmq$mmq.md | cut -d'|' -f2-5; tail -1 $OUT/bench-mmq$mmq.md
done
