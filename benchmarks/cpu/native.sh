#!/usr/bin/env bash
# Decode tokens/s of a default build against a `RUSTFLAGS="-C target-cpu=native"` build of the
# same commit, alternating per repetition. Usage: benchmarks/cpu/native.sh DEFAULT NATIVE [REPS]
set -euo pipefail
base=$1; native=$2; reps=${3:-3}
prompt="Write a Python function that checks whether a number is prime."
rate() { sed -n 's/.*decode [0-9]* tokens at \([0-9.]*\) tok\/s.*/\1/p'; }
printf "| model | rep | default build | target-cpu=native |\n| --- | ---: | ---: | ---: |\n"
for m in smollm2 drafter target; do
  for r in $(seq 1 "$reps"); do
    a=$("$base" generate -m "$m" -p "$prompt" --max-tokens 64 2>&1 >/dev/null | rate)
    b=$("$native" generate -m "$m" -p "$prompt" --max-tokens 64 2>&1 >/dev/null | rate)
    printf "| %s | %s | %s | %s |\n" "$m" "$r" "$a" "$b"
  done
done
