#!/usr/bin/env bash
# For the next session (issue 38; not run yet): after s1.sh and 20 x sp.sh (the binary, the shipped
# head and the real 1.5B target staged), start an EAGLE-3 head run detached: the shipped head as
# its start (`--init`; a head that reads the last layer starts as it was, BENCHMARKS 43), fed four
# fused target layers (`--feature-layers eagle3`), on 3,000 new two-turn self-written
# conversations, a fifth of the code prompts (two turns) and this session's 2,789 sequences
# (g2/data.json.xz, `--extra-data`), k = 3, cosine from 2e-4 over STEPS; the best checkpoint by
# held-out walked tau kept beside the head. Polls the log until ~UNTIL s.
# Sizes (from g1's run): ~10.3k sequences of ~290 positions; four f32 layers keep ~7 MB a
# sequence, ~72 GB in all, so --cache-gib 48 keeps two thirds and the target reads the rest again
# each epoch; data ~340 s, 700 steps ~1.9 epochs ~530 s: the run outlives this call (e2.sh waits).
source benchmarks/gpu/lib.sh
T=$S/t.gguf; H0=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf; D=$S/e3
[ -f $T ] || { cat $(ls $S/p/t.* | sort -V) > $T && rm -rf $S/p; }
sha256sum $T | cut -c1-16   # cc324af070c2ecbf
mkdir -p $D
zcat benchmarks/train-data/code.jsonl.gz | awk -v n=${CODE_EVERY:-5} "NR % n == 1" > $S/code5.jsonl
xz -dc benchmarks/gpu/run-2026-12-07c/g2/data.json.xz > $S/chat1.data.json
pgrep -f train-drafter > /dev/null || setsid nohup $B train-drafter --device cuda --context 16384 \
  --target $T --out $D/head.safetensors --init $H0 --feature-layers eagle3 \
  --self-prompts ${SELF_PROMPTS:-3000} --turns 2 --data $S/code5.jsonl --extra-data $S/chat1.data.json \
  --answer-tokens 192 --k 3 --eval --batch-tokens 8192 --cache-gib ${CACHE_GIB:-48} --lr 2e-4 \
  --steps ${STEPS:-700} --seed 8 > $D/train.log 2>&1 < /dev/null &
while [ $SECONDS -lt ${UNTIL:-560} ] && pgrep -f train-drafter > /dev/null; do sleep 20; echo "$SECONDS s: $(tail -1 $D/train.log | cut -c1-220)"; done
grep -v "after" $D/train.log | cut -c1-400 | tail -12
