#!/usr/bin/env bash
# Decode tokens/s per CPU kernel path, side by side with candle's kernels (treespec before its own
# kernels, commit defc964), alternating binaries per repetition. Usage:
#   benchmarks/cpu/kernel-paths.sh OLD_BINARY NEW_BINARY [REPS]
set -euo pipefail
old=$1; new=$2; reps=${3:-3}
prompt="Write a Python function that checks whether a number is prime."
rate() { sed -n 's/.*decode [0-9]* tokens at \([0-9.]*\) tok\/s.*/\1/p'; }
printf "| model | rep | candle kernels | avx2 | portable |\n| --- | ---: | ---: | ---: | ---: |\n"
for m in smollm2 drafter target; do
  for r in $(seq 1 "$reps"); do
    a=$("$old" generate -m "$m" -p "$prompt" --max-tokens 64 2>&1 >/dev/null | rate)
    b=$(TREESPEC_CPU_KERNELS=avx2 "$new" generate -m "$m" -p "$prompt" --max-tokens 64 2>&1 >/dev/null | rate)
    c=$(TREESPEC_CPU_KERNELS=portable "$new" generate -m "$m" -p "$prompt" --max-tokens 16 2>&1 >/dev/null | rate)
    printf "| %s | %s | %s | %s | %s |\n" "$m" "$r" "$a" "$b" "$c"
  done
done
