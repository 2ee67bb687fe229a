#!/usr/bin/env bash
# Call 3 (carry [".stage/bin/treespec.xz", ".stage/tok"]; after c2.sh on the same machine, or
# alone): an MTP head fed four fused target layers (issue 38, `train-drafter --feature-layers
# eagle3`) on the GPU, on a Qwen2.5-1.5B-shaped synthetic target: a head trained 8 steps reading
# the last layer; the same head fused (started from it, 0 steps: the same predictions to the
# norm's epsilon, so the same tau); the GPU step's head check on both; `ar` and `mtp` k=3 with
# each, every output exactly `ar`'s, and the fused head's speed against the plain one's (the
# fusion's cost: a normalisation and a [1536 x 6144] product a step).
source benchmarks/gpu/lib.sh
T=$S/s15.gguf; H=$S/fh; mkdir -p $H/plain $H/fused
[ -f $T ] || $B synth --shape qwen2.5-1.5b --tokenizer-from $S/tok.gguf --out $T > /dev/null 2>&1
TR="train-drafter --device cuda -m $T --self-prompts 16 --answer-tokens 64 --k 3 --draft-vocab 0"
timeout 120 $B $TR --steps 8 --out $H/plain/head.safetensors > $OUT/train-plain.log 2>&1
echo "plain rc=$? at ${SECONDS}s"; tail -2 $OUT/train-plain.log | cut -c1-200
$B export-head -m $T --head $H/plain/head.safetensors --out $H/plain-f32.gguf --type f32 > /dev/null
cp $H/plain/head.safetensors.data.json $H/fused/
timeout 60 $B $TR --steps 0 --feature-layers eagle3 --init $H/plain-f32.gguf --out $H/fused/head.safetensors > $OUT/train-fused.log 2>&1
echo "fused rc=$? at ${SECONDS}s"; tail -2 $OUT/train-fused.log | cut -c1-200
for h in plain fused; do
  $B export-head -m $T --head $H/$h/head.safetensors --out $H/$h.gguf > /dev/null
  timeout 60 $B selftest --device cuda -m $T --head $H/$h.gguf > $OUT/selftest-$h.txt 2>&1
  echo "selftest $h rc=$?: $(grep -i "head" $OUT/selftest-$h.txt | tail -2 | cut -c1-160)"
done
for r in 1 2; do for h in plain fused; do
  timeout 60 $B bench --device cuda --target $T --drafter $H/$h.gguf --modes ar,mtp:3 --limit 3 --max-tokens 96 --require-identical > $OUT/bench-$h-$r.md 2>&1
  echo "bench $h run $r rc=$?"; grep -i "mtp\|every mode\|differ" $OUT/bench-$h-$r.md | head -4 | cut -c1-160
done; done
