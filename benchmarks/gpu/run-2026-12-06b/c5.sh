#!/usr/bin/env bash
# Session 24, call 5: after a second read's fixes (a failed pass resets a hybrid's sequence; a
# chain longer than the stash stays pending but not replayable; no eager rerun after a replay that
# may have folded): the hybrid step's check again on the 0.8B shape, and a mode run.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec; D=$S/q08.gguf
$B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > /dev/null 2>&1
timeout 90 $B selftest --device cuda -m $D > $OUT/selftest08.txt 2>&1
echo "selftest -m 0.8B rc=$? at ${SECONDS}s"; grep '^q08' $OUT/selftest08.txt | cut -c1-160
timeout 60 $B bench --device cuda --target $D --drafter $D --modes ar,linear,tree:16x4 --limit 1 \
  --max-tokens 32 --require-identical > $OUT/modes08.md 2>&1
echo "modes rc=$? at ${SECONDS}s: $(tail -1 $OUT/modes08.md)"
