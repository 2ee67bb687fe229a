#!/usr/bin/env python3
"""llama.cpp's linear speculative decoding (llama-speculative-simple) on the first prompts of each
bundled set, for the side-by-side table of BENCHMARKS.md section 19.

Usage: llama-spec.py LLAMA_BIN_DIR TARGET.gguf DRAFTER.gguf OUT_DIR [PROMPTS_PER_SET] [DRAFT_MAX]
Each prompt goes in the Qwen chat template with its default system prompt (what treespec's bench
renders from the GGUF's template), 128 new tokens, temperature 0, every layer of both models on
the GPU. Prints one markdown row per set: decoded tokens over llama.cpp's own decode time."""
import json
import os
import re
import subprocess
import sys

bins, target, drafter, out = sys.argv[1:5]
per_set = int(sys.argv[5]) if len(sys.argv) > 5 else 5
draft_max = sys.argv[6] if len(sys.argv) > 6 else "8"
here = os.path.dirname(os.path.abspath(__file__))
system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
for name in ["humaneval", "gsm8k", "chat"]:
    path = os.path.join(here, "..", "prompts", f"{name}.jsonl")
    prompts = [json.loads(l)["prompt"] for l in open(path) if l.strip()][:per_set]
    tokens, seconds, accepted = 0, 0.0, []
    for i, text in enumerate(prompts):
        p = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
             "<|im_start|>assistant\n")
        cmd = [os.path.join(bins, "llama-speculative-simple"), "-m", target, "-md", drafter,
               "-p", p, "-n", "128", "--temp", "0", "-ngl", "99", "-ngld", "99", "-c", "2048",
               "--spec-type", "draft-simple", "--spec-draft-n-max", draft_max]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        log = r.stdout + r.stderr
        with open(os.path.join(out, f"llama-spec-{name}-{i}.log"), "w") as f:
            f.write(log[-6000:])
        speed = re.findall(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds", log)
        if speed:
            tokens += int(speed[-1][0])
            seconds += float(speed[-1][1])
        acc = re.findall(r"accept\s*=\s*([0-9.]+)%", log)
        accepted.append(acc[-1] if acc else "-")
    rate = tokens / seconds if seconds else 0.0
    print(f"| {name} ({len(prompts)}) | {tokens} tokens in {seconds:.2f} s | {rate:.1f} tok/s "
          f"| accepted {', '.join(accepted)}% |")
