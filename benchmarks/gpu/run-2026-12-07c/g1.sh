#!/usr/bin/env bash
# Session 32, call "g1" (after s1.sh and 20 sp.sh): join the target, check it, and start the
# training run detached (it outlives the call): the shipped head (section 26) trained on on
# two-turn conversations the target writes itself across the eight built-in categories, and on
# a tenth of benchmarks/train-data's code prompts (two turns too), k = 3, cosine from 2e-4 over
# STEPS; the bundled sets measured as it trains (--eval, by category). Polls the log until
# ~560 s.
source benchmarks/gpu/lib.sh
T=$S/t.gguf; H0=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf
[ -f $T ] || { cat $(ls $S/p/t.* | sort -V) > $T && rm -rf $S/p; }
sha256sum $T | cut -c1-16   # cc324af070c2ecbf
zcat benchmarks/train-data/code.jsonl.gz | awk -v n=${CODE_EVERY:-10} "NR % n == 1" > $S/code.jsonl; wc -l < $S/code.jsonl
mkdir -p $S/head
pgrep -f train-drafter > /dev/null || setsid nohup $B train-drafter --device cuda --context 16384 \
  --target $T --out $S/head/head.safetensors --init $H0 --self-prompts ${SELF_PROMPTS:-1000} \
  --turns 2 --data $S/code.jsonl --answer-tokens ${ANSWER_TOKENS:-192} --k 3 --eval \
  --batch-tokens 8192 --cache-gib 64 --lr 2e-4 --steps ${STEPS:-400} --seed 7 \
  > $S/head/train.log 2>&1 < /dev/null &
while [ $SECONDS -lt ${UNTIL:-560} ] && pgrep -f train-drafter > /dev/null; do sleep 20; echo "$SECONDS s: $(tail -1 $S/head/train.log | cut -c1-220)"; done
grep -v "after" $S/head/train.log | cut -c1-400 | tail -12
cp $S/head/train.log $OUT/
