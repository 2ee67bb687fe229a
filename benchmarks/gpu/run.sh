#!/usr/bin/env bash
# On the H200 machine, with the binary and the GGUF files staged in /root/stage (in parts, see
# ../shared/device/README.md): plain decoding speed, the cost table, and the modes side by side on
# the default pair with and without batch-invariant products. Writes logs and JSON under $OUT and
# prints the tables last. Usage: benchmarks/gpu/run.sh [llama-build|check|ncu|llama|ar|costs|modes|profile|variance|synth|dp4a-row|llama-spec|train-start|train-status|train-fetch|train-export|head-check|train-carry|train-restore]...
# T=... and D=... replace the target and the drafter (e.g. the files `synth` writes: random weights
# of the 1.5B's, the 0.5B's or Qwen3-8B's shape and formats, for timing without staging a model).
set -euo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage
B="$S/treespec"
T="${T:-$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}"
D="${D:-$S/qwen2.5-coder-0.5b-instruct-awq.gguf}"
M="$S/SmolLM2-135M-Instruct.Q4_1.gguf"
prompt="Write a Python function that checks whether a number is prime."
# DRAFTER_DEVICE=cuda:1 runs the drafter on a second GPU (the two-GPU machine kind) in modes/profile.
DD=(${DRAFTER_DEVICE:+--drafter-device "$DRAFTER_DEVICE"})
rate() { sed -n 's/.*decode [0-9]* tokens at \([0-9.]*\) tok\/s.*/\1/p'; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
[ $# -gt 0 ] || set -- ar costs modes variance
for what in "$@"; do
  case $what in
  ar)
    echo "| model | treespec ar tok/s (3 runs, 256 tokens) |"
    echo "| --- | --- |"
    for m in "$M" "$T" "$D"; do
      r=""
      for i in 1 2 3; do
        r="$r $("$B" generate --device cuda -m "$m" -p "$prompt" --max-tokens 256 2>&1 >/dev/null | rate)"
      done
      echo "| $(basename "$m") |$r |"
    done | tee "$OUT/gpu-ar.md" ;;
  check)
    "$B" selftest --device cuda -m "$M" -m "$T" -m "$D" 2>&1 | tee "$OUT/gpu-selftest.txt" || true ;;
  ncu)
    # Where a decode step's GPU time goes: every kernel of a 16-token answer, run eagerly.
    TREESPEC_CUDA_GRAPHS=0 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv \
      --log-file "$OUT/ncu-target.csv" "$B" generate --device cuda -m "$T" -p "$prompt" \
      --max-tokens 16 > /dev/null 2>&1 || true
    python3 "$(dirname "$0")/kernel-times.py" "$OUT/ncu-target.csv" 16 | tee "$OUT/ncu-target.txt" | head -20 ;;
  llama-build)
    mkdir -p /root/llama && tar -xJf "$S/llama.tar.xz" -C /root/llama
    cd /root/llama && setsid nohup bash -c "cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DCMAKE_BUILD_TYPE=Release && cmake --build build --target llama-bench llama-speculative-simple -j16 && touch /root/llama/done" \
      > /root/llama/build.log 2>&1 < /dev/null & cd - > /dev/null ;;
  llama)
    while [ ! -f /root/llama/done ]; do sleep 5; done
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/root/llama/build/bin
    for m in "$M" "$T" "$D"; do
      echo "$(basename "$m"): $(/root/llama/build/bin/llama-bench -m "$m" -ngl 99 -p 0 -n 256 -r 3 -o md | grep tg256)"
    done | tee "$OUT/llama-bench.md" ;;
  llama-spec)
    # llama.cpp's linear speculative decoding on the default pair, the first LIMIT (5) prompts
    # of each set; compare with `MODES=ar,linear,tree,auto LIMIT=5 run.sh modes`.
    while [ ! -f /root/llama/done ]; do sleep 5; done
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/root/llama/build/bin
    python3 "$(dirname "$0")/llama-spec.py" /root/llama/build/bin "$T" "$D" "$OUT" "${LIMIT:-5}" \
      | tee "$OUT/llama-spec.md" ;;
  train-start)
    # Train an MTP head for the target in the background (issue 12): the machine outlives a
    # command of 10 minutes, so the run goes on between calls; a run started with the same
    # --out resumes from its checkpoint (put a fetched one back first: train-restore).
    # STEPS (2000), SELF_PROMPTS (2000), ANSWER_TOKENS (256) and K (3) set its size; a context of
    # 16384 lets the answers be written 32 side by side; --eval measures the head on the first
    # 16 bundled prompts of each set (never trained on) at every record. TREESPEC_PROFILE=1 adds where a step's
    # time goes (target pass, head, loss, backward) to each held-out record in the log.
    # BATCH_TOKENS (8192) sets the positions a step reads; CACHE_GIB (64) how much of the
    # target's outputs stays on the GPU (all of them, for a few million tokens); INIT=HEAD.gguf
    # starts from an exported head (train-carry puts one back); EXTRA_DATA=FILE... trains on an
    # earlier run's answers too (HEAD.safetensors.data.json: e.g. a run with STEPS=0 and
    # DATA="code.jsonl writing.jsonl", the prompts benchmarks/train-data/make_prompts.py writes,
    # SELF_PROMPTS=0, and its own --out folder: OUT_DIR=DIR). LR_SCHEDULE (cosine) decays the
    # rate to a tenth at STEPS: set STEPS to what the session can run (~0.25 s a step after the
    # first epoch), or LR_SCHEDULE=constant for an open-ended run.
    o="${OUT_DIR:-$S/head}"; mkdir -p "$o"
    setsid nohup "$B" train-drafter --device cuda --context 16384 --target "$T" --out "$o/head.safetensors" \
      --steps "${STEPS:-2000}" --self-prompts "${SELF_PROMPTS:-2000}" \
      --answer-tokens "${ANSWER_TOKENS:-256}" --k "${K:-3}" --eval \
      --batch-tokens "${BATCH_TOKENS:-8192}" --cache-gib "${CACHE_GIB:-64}" --lr "${LR:-2e-4}" \
      --lr-schedule "${LR_SCHEDULE:-cosine}" \
      ${INIT:+--init "$INIT"} ${DATA:+--data $DATA} ${EXTRA_DATA:+--extra-data $EXTRA_DATA} \
      >> "$o/train.log" 2>&1 < /dev/null &
    sleep 20; tail -c 2000 "$o/train.log" ;;
  train-status)
    pgrep -f "treespec train-drafter" > /dev/null && echo "training: running" || echo "training: not running"
    tail -c 3000 "$S/head/train.log"; ls -la "$S/head" ;;
  train-fetch)
    # The head and its record back through $OUT in parts of 15 MiB (8 files a call at most:
    # PART=0 for the first eight, 1 for the next...); join them here with
    # `cat head.tar.gz.* | tar -xz`.
    (cd "$S/head" && tar -cz --exclude=train.log -f /tmp/head.tar.gz . && rm -f /tmp/head.tar.gz.* \
      && split -b 15M -d -a 2 /tmp/head.tar.gz /tmp/head.tar.gz.)
    ls /tmp/head.tar.gz.* | sed -n "$((8 * ${PART:-0} + 1)),$((8 * ${PART:-0} + 8))p" | xargs -r -I{} cp {} "$OUT/"
    ls -la /tmp/head.tar.gz.* ;;
  train-export)
    # The head as a Q8_0 GGUF (~54 MB for the 1.5B: one call of parts), its record and its data,
    # through $OUT at once: what to bring back first (a machine that stops answering is gone).
    "$B" export-head -m "$T" --head "$S/head/head.safetensors" --out "$S/head/head.gguf"
    rm -f /tmp/head.gguf.*; split -b 15M -d -a 2 "$S/head/head.gguf" /tmp/head.gguf.
    cp /tmp/head.gguf.* "$S/head/head.safetensors.json" "$OUT/"
    gzip -c "$S/head/head.safetensors.data.json" > "$OUT/head.data.json.gz"; ls -la "$OUT" ;;
  head-check)
    # The exported head (train-export) on the GPU step against candle's ops, and mtp's speed
    # with and without it (TREESPEC_MTP_GPU_STEP=0), interleaved.
    "$B" selftest --device cuda -m "$T" --head "$S/head/head.gguf" 2>&1 | grep -i "mtp head\|error" | tee "$OUT/head-check.txt"
    for i in 1 2; do for g in 1 0; do
      echo "TREESPEC_MTP_GPU_STEP=$g: $(TREESPEC_MTP_GPU_STEP=$g "$B" generate --device cuda -m "$T" \
        --drafter "$S/head/head.gguf" --mode mtp -p "$prompt" --max-tokens 256 2>&1 >/dev/null | tail -1)"
    done; done | tee -a "$OUT/head-check.txt" ;;
  train-carry)
    # An exported head and its data carried in (HEAD_DIR, .stage/head-i/ by default: head.gguf.NN
    # and head.data.json.gz, as train-export brought them back; 57 MB, two calls with the tree):
    # the head to start from ($S/head/init.gguf, INIT= for train-start) and the data, so that
    # nothing is generated again (train-start with the SELF_PROMPTS and ANSWER_TOKENS it was made
    # with).
    hd="${HEAD_DIR:-.stage/head-i}"
    mkdir -p "$S/head" && cat "$hd"/head.gguf.* > "$S/head/init.gguf" \
      && gunzip -c "$hd/head.data.json.gz" > "$S/head/head.safetensors.data.json" && ls -la "$S/head" ;;
  train-restore)
    # A head fetched in an earlier session, carried back in (as the models are: .stage/head/
    # head.tar.gz.NN, 50 MiB a call), unpacked where train-start resumes from it.
    mkdir -p "$S/head" && cat .stage/head/head.tar.gz.* | tar -xz -C "$S/head" && ls -la "$S/head" ;;
  synth)
    for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
      "$B" synth --shape "$shape" --out "$S/synth-$shape.gguf"
    done ;;
  costs)
    "$B" bench --device cuda --costs --target "$T" --drafter "$D" 2>&1 | tee "$OUT/gpu-costs.md" | tail -25 ;;
  modes)
    "$B" bench --device cuda "${DD[@]}" --target "$T" --drafter "$D" --limit "${LIMIT:-6}" --max-tokens 128 \
      --modes "${MODES:-ar,linear,tree,linear:6@0,tree:32x6@0}" --json "$OUT/gpu-modes.json" \
      > "$OUT/gpu-modes.log" 2>&1 || { tail -40 "$OUT/gpu-modes.log"; exit 1; }
    sed -n '/^settings:/,$p' "$OUT/gpu-modes.log"
    # What auto did step by step where it lost most (bench --json traces its answers).
    case ",${MODES:-}," in *,auto,*)
      python3 "$(dirname "$0")/auto-trace.py" "$OUT/gpu-modes.json" > "$OUT/auto-trace.txt" || true ;;
    esac ;;
  dp4a-row)
    # The one-row dp4a kernels against each other (TREESPEC_DP4A_ROW: candle's one weight row a
    # block, one row a warp without dependent launches, the default): selftest first (every
    # kernel bit for bit against candle's), then plain decoding interleaved on SmolLM2 and the
    # drafter.
    "$B" selftest --device cuda -m "$M" -m "$D" > "$OUT/selftest-dp4a-row.txt" 2>&1 \
      || { tail -5 "$OUT/selftest-dp4a-row.txt"; exit 1; }
    for m in "$M" "$D"; do
      for i in 1 2 3; do
        r=""
        for k in block warps-nowait warps; do
          r="$r | $k $(TREESPEC_DP4A_ROW=$k "$B" generate --device cuda -m "$m" -p "$prompt" --max-tokens 256 2>&1 >/dev/null | rate)"
        done
        echo "$(basename "$m")$r"
      done
    done | tee "$OUT/dp4a-row.txt" ;;
  profile)
    # Where a round's time goes, span by span (each span waits for the GPU at both ends): one
    # mode at a time, MODE (default linear), LIMIT prompts of each set.
    TREESPEC_PROFILE=1 "$B" bench --device cuda "${DD[@]}" --target "$T" --drafter "$D" --limit "${LIMIT:-5}" \
      --max-tokens 128 --modes "${MODE:-linear}" > "$OUT/gpu-profile.log" 2>&1 || true
    grep '^profile' "$OUT/gpu-profile.log" ;;
  variance)
    TREESPEC_GPU_BATCH_INVARIANT=0 "$B" bench --device cuda --target "$T" --drafter "$D" \
      --limit "${LIMIT:-6}" --max-tokens 128 --modes "${MODES:-ar,linear,tree,linear:6@0,tree:32x6@0}" \
      --json "$OUT/gpu-modes-variant.json" > "$OUT/gpu-modes-variant.log" 2>&1 \
      || { tail -40 "$OUT/gpu-modes-variant.log"; exit 1; }
    sed -n '/^settings:/,$p' "$OUT/gpu-modes-variant.log" ;;
  esac
done
