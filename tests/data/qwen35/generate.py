"""Golden data for treespec's Qwen3.5 (hybrid: Gated DeltaNet + gated attention) support (issue 37).

A tiny random Qwen3.5 text model built with Hugging Face transformers (>= 5.2.0; run with 5.25.0),
its weights in safetensors, and the logits an independent reference gives:

- `prefix`: logits of every position of a prompt, from one full-sequence forward without a cache;
- `tree`: a draft tree (parents, tokens; branching, depth >= 4) after the prompt, each node's
  expected logits those of a cache-free forward over prompt + the node's root-to-node path (exact,
  and independent of any tree algorithm);
- `continue`: after accepting a path of the tree, the logits of one more token (what a decoder
  that folded the accepted path into its recurrent state must give).

Then the same model through llama.cpp's own converter (`convert_hf_to_gguf.py` of the llama.cpp
that llama-cpp-python 0.3.36 vendors; pass its `vendor/llama.cpp` as LLAMA_CPP, `--outtype f32 --no-mtp`: this model has no MTP head):
`model.gguf`, with llama.cpp's transforms (norms + 1, `-exp(A_log)`, the value heads reordered
"tiled"), so the GGUF reader is checked against upstream, not against treespec's own reading. The
tiny BPE tokenizer it needs is trained here; the converter's check of known pre-tokenizers is told
it is `qwen35`'s (the only change to its behaviour).

The model has more GDN value heads than key heads (grouped value attention) and the torch f32 path
of transformers (no `fla`, no `causal_conv1d`). Norm weights, the conv, A_log, dt_bias and the
gated norm are randomised after init (init makes them trivial). Run: `python3 generate.py` (CPU,
a few seconds); tests read the outputs and never need Python.
"""
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import save_file
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

torch.manual_seed(20261204)
here = os.path.dirname(os.path.abspath(__file__))

cfg = Qwen3_5TextConfig(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10_000_000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [2, 1, 1],
        "mrope_interleaved": True,
    },
    max_position_embeddings=4096,
)
cfg._attn_implementation = "eager"
model = Qwen3_5ForCausalLM(cfg).float().eval()

with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("linear_attn.norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn_like(p))  # the gated norm: plain w
        elif "norm" in name:
            p.copy_(0.1 * torch.randn_like(p))  # (1 + w) norms
        elif name.endswith("conv1d.weight"):
            p.copy_(0.3 * torch.randn_like(p))
        elif name.endswith("A_log"):
            p.copy_(torch.log(torch.empty_like(p).uniform_(1.0, 16.0)))
        elif name.endswith("dt_bias"):
            p.copy_(torch.randn_like(p))
        elif p.dim() == 2:
            p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)

state = {k: v.contiguous() for k, v in model.state_dict().items()}
save_file(state, os.path.join(here, "model.safetensors"))
text = cfg.to_dict()
text["architectures"] = ["Qwen3_5ForCausalLM"]
with open(os.path.join(here, "config.json"), "w") as f:
    json.dump(text, f, indent=1, default=str)


def logits_of(tokens):
    """Logits of every position of one cache-free forward."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens]), use_cache=False)
    return out.logits[0].float()


prompt = [int(t) for t in torch.randint(0, cfg.vocab_size, (13,))]
prefix = logits_of(prompt)

# A tree after the prompt: node 0 is the root (the token after the prompt); parents come first.
parents = [-1, 0, 0, 1, 1, 2, 3, 3, 6, 8, 5, 9]
tokens = [int(t) for t in torch.randint(0, cfg.vocab_size, (len(parents),))]


def path(i):
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


nodes = []
for i in range(len(parents)):
    seq = prompt + [tokens[j] for j in path(i)]
    nodes.append(logits_of(seq)[-1].tolist())
accepted = path(9)  # depth 5: 0 1 3 6 8 9
nxt = int(torch.randint(0, cfg.vocab_size, (1,)))
cont = logits_of(prompt + [tokens[j] for j in accepted] + [nxt])[-1].tolist()

golden = {
    "generator": "tests/data/qwen35/generate.py, transformers %s, torch %s"
    % (__import__("transformers").__version__, torch.__version__),
    "prompt": prompt,
    "prefix_logits": prefix.tolist(),
    "tree": {"parents": parents, "tokens": tokens, "logits": nodes},
    "continue": {"accepted": accepted, "token": nxt, "logits": cont},
}
with open(os.path.join(here, "golden.json"), "w") as f:
    json.dump(golden, f)
print("wrote model.safetensors, config.json, golden.json")

# ---- The GGUF, by llama.cpp's converter ----
llama = os.environ.get("LLAMA_CPP")
if llama:
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
    )
    corpus = [open(__file__).read()] * 4 + ["the quick brown fox jumps over the lazy dog " * 50]
    tok.train_from_iterator(corpus, trainer)
    tok.save(os.path.join(here, "tokenizer.json"))
    with open(os.path.join(here, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}, f)
    wrapper = (
        "import sys; sys.path.insert(0, %r); sys.path.insert(0, %r)\n"
        "import conversion.base as b\n"
        "b.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'qwen35'\n"
        "import convert_hf_to_gguf as c\n"
        "sys.argv = ['convert', %r, '--outfile', %r, '--outtype', 'f32', '--no-mtp']\n"
        "c.main()\n"
    ) % (os.path.join(llama, "gguf-py"), llama, here, os.path.join(here, "model.gguf"))
    subprocess.run([sys.executable, "-c", wrapper], check=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.remove(os.path.join(here, f))
    print("wrote model.gguf")
