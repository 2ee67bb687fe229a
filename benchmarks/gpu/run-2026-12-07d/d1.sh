#!/usr/bin/env bash
# For a later session (issue 38; not run yet). After ../run-2026-12-07c/s1.sh and 20 x sp.sh
# (the binary, a CUDA build with `train-drafter --dflash`, a49df7d on, and the real 1.5B target
# staged): train a DFlash drafter for the default target from random weights, DFLASH layers x
# block (2x16; FROM_TARGET=1: its layers started as the target's last two, section 50's A/B),
# on SELF_PROMPTS new two-turn self-written conversations (the held-out ones are
# their last) and session 32's 2,789 sequences (../run-2026-12-07c/g2/data.json.xz), cosine from
# LR over STEPS; the held-out answers and the bundled sets (`--eval`, by category) walked every
# 200 steps. The run is detached and outlives the call (d2.sh waits for it); polls the log until
# ~UNTIL s. Run again with a larger STEPS to resume from the last record (f40af28 on). The loss
# decays by depth with gamma 7, the default for blocks of 16 from 197b5d4 on.
source benchmarks/gpu/lib.sh
T=$S/t.gguf; D=$S/dflash
[ -f $T ] || { cat $(ls $S/p/t.* | sort -V) > $T && rm -rf $S/p; }
sha256sum $T | cut -c1-16   # cc324af070c2ecbf
xz -dc benchmarks/gpu/run-2026-12-07c/g2/data.json.xz > $S/chat1.data.json
pgrep -f train-drafter > /dev/null || setsid nohup $B train-drafter --device cuda --context 16384 \
  --target $T --out $D --dflash ${DFLASH:-2x16} ${FROM_TARGET:+--dflash-from-target} --self-prompts ${SELF_PROMPTS:-300} --turns 2 \
  --extra-data $S/chat1.data.json --answer-tokens 192 --batch-tokens 8192 --cache-gib 48 --eval \
  --lr ${LR:-6e-4} --steps ${STEPS:-600} --seed 9 > $S/dflash.log 2>&1 < /dev/null &
while [ $SECONDS -lt ${UNTIL:-560} ] && pgrep -f train-drafter > /dev/null; do sleep 20; echo "$SECONDS s: $(tail -1 $S/dflash.log | cut -c1-200)"; done
grep -v "after" $S/dflash.log | cut -c1-300 | tail -12
