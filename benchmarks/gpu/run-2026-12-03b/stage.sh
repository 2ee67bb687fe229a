#!/usr/bin/env bash
# Session 18, staging calls: the binary (first call) and one 48 MiB part of the real pair a call
# (../shared/device/README.md: the work tree plus a part fit the 64 MiB a call carries), copied to
# /root/stage, which lasts while the machine is kept.
S=/root/stage; mkdir -p $S/p
if [ -f .stage/bin/treespec.gz ]; then
  gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
fi
cp .stage/p/* $S/p/ 2>/dev/null
echo "$(ls $S/p | wc -l) parts, $(du -sb $S/p | cut -f1) bytes"
