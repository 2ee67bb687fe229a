#!/usr/bin/env bash
# c2.sh, then c3.sh on the same machine where time is left (one start for both).
bash benchmarks/gpu/run-2026-12-07/c2.sh
echo "== c3 at ${SECONDS}s"
[ $SECONDS -lt 420 ] && bash benchmarks/gpu/run-2026-12-07/c3.sh
