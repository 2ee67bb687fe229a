#!/usr/bin/env bash
# Session 25, call 7 (same machine): 2- and 4-row verify passes of the 27B with the warp-a-row
# kernels (then for 1, 2 and 4 rows) and without (TREESPEC_MMTC_WARP=0). Output (not kept: the
# files' names had '='):
#   WARP=0: step 11.53 ms; 2 rows 14.43 (1.25 steps); 4 rows 21.00 (1.82)
#   WARP=1: step  9.21 ms; 2 rows 12.61 (1.37 steps); 4 rows 21.88 (2.37)
S=/root/stage; export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64; export TREESPEC_CACHE=$S/cache; B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
for v in TREESPEC_MMTC_WARP=0 TREESPEC_MMTC_WARP=1; do env $v timeout 100 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 2,4 > $OUT/costs27-${v#*=}.md 2>&1; echo "costs [$v] rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27-${v#*=}.md | sed -n 4,7p | cut -c1-160; done
