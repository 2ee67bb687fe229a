#!/usr/bin/env bash
# Session 23, call 2 (right after l1.sh, same machine): the selftest of the split step, then issue
# 37's first figures at the 27B shape.
# Both synthetic files carry the real Qwen2.5 tokenizer (a header-only GGUF made from the default
# drafter, so llama.cpp loads them; the LM head then has 151,936 rows, not 248,320). treespec:
# `bench --costs` (the decode step and verify passes of 8 and 64 rows) and `generate` in `ar`;
# llama.cpp: llama-bench tg128, and llama-speculative-simple with its MTP drafter (random weights:
# acceptance means nothing, the round's cost does).
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
$B synth --shape qwen3.6-27b --tokenizer-from $S/tok.gguf --out $T > $OUT/synth27.txt 2>&1 &
$B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > $OUT/synth08.txt 2>&1 &
$B synth --shape qwen2.5-0.5b --out $S/q05.gguf > /dev/null 2>&1 &
wait; echo "synth done at ${SECONDS}s"; cat $OUT/synth27.txt; ls -la $T $D
# The step split into a folder (issue 39): every kernel and the whole step against the CPU.
timeout 90 $B selftest --device cuda -m $S/q05.gguf > $OUT/selftest.txt 2>&1
echo "selftest rc=$? at ${SECONDS}s"; grep -ci 'error\|differ' $OUT/selftest.txt; tail -4 $OUT/selftest.txt | cut -c1-220
timeout 240 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,8,64 > $OUT/costs27.md 2>&1
echo "costs rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27.md | tail -12
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
timeout 150 $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 64 > $OUT/gen27.txt 2>$OUT/gen27.err
echo "generate rc=$? at ${SECONDS}s"; tail -2 $OUT/gen27.err
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 500 ]; do sleep 5; done
echo "llama build at ${SECONDS}s: $(ls /root/llama/done 2>&1)"; tail -3 /root/llama/build.log
L=/root/llama/build/bin
timeout 120 $L/llama-bench -m $T -ngl 99 -p 0 -n 128 -r 2 -o md > $OUT/llama-bench27.md 2>&1
echo "llama-bench rc=$? at ${SECONDS}s"; grep 'tg128' $OUT/llama-bench27.md
timeout 90 $L/llama-speculative-simple -m $T -ngl 99 --spec-type draft-mtp --spec-draft-n-max 3 -p "$P" -n 128 \
  > $OUT/llama-mtp27.txt 2>&1
echo "llama mtp rc=$? at ${SECONDS}s"; grep -i 'decoded\|speed\|accept\|n_draft\|t/s' $OUT/llama-mtp27.txt | tail -8
