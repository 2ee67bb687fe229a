#!/usr/bin/env bash
# Session 32, staging (issue 38: the shipped head trained on chat on the real target). Call 1
# (carry [".stage/bin/treespec.xz"]): the binary and the shipped head (heads/, in the work tree)
# to /root/stage. Then sp.sh once a part (carry [".stage/p/t.NN"]): the real 1.5B target in 20
# parts of 54 MiB (split -b 54M -d -a 2), the work tree cut to ~9 MB for the call by moving heads/
# and tests/data/ aside here.
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cp heads/*.gguf $S/ && ls -la $S | tail -4
