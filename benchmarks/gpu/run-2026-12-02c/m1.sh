# Unpack the binary; move carried model parts, head parts and prompt files out of the tree.
set -u
S=/root/stage; mkdir -p $S/p $S/hk $S/td
[ -f .stage/bin/treespec.gz ] && gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
mv .stage/parts/* $S/p/ 2>/dev/null
cp .stage/head-k/* $S/hk/ 2>/dev/null
cp .stage/td/* $S/td/ 2>/dev/null
[ -f heads/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf ] && cp heads/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf $S/shipped-q4k.gguf
ls $S/p | wc -l; ls $S/hk $S/td | tr '\n' ' '; echo
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
