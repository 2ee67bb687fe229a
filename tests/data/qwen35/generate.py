"""Golden data for treespec's Qwen3.5 (hybrid: Gated DeltaNet + gated attention) support (issue 37).

A tiny random Qwen3.5 text model built with Hugging Face transformers (>= 5.2.0; run with 5.25.0),
its weights in safetensors, and the logits an independent reference gives:

- `prefix`: logits of every position of a prompt, from one full-sequence forward without a cache;
- `tree`: a draft tree (parents, tokens; branching, depth >= 4) after the prompt, each node's
  expected logits those of a cache-free forward over prompt + the node's root-to-node path (exact,
  and independent of any tree algorithm);
- `continue`: after accepting a path of the tree, the logits of one more token (what a decoder
  that folded the accepted path into its recurrent state must give);
- `mtp_golden.json`: the native MTP head (random `mtp.*` tensors, in the checkpoint as the
  released models keep them) run as vLLM's `Qwen3_5MultiTokenPredictor` does, from transformers'
  own decoder layer and norm: the first pass over the prompt (the target's post-norm hidden
  states, embedding first), a greedy chain after the root, and a tree the head grows, each node's
  logits those of a cache-free pass along its path.

Then the same model through llama.cpp's own converter (`convert_hf_to_gguf.py` of the llama.cpp
that llama-cpp-python 0.3.36 vendors; pass its `vendor/llama.cpp` as LLAMA_CPP; `--outtype f32`,
the MTP head as `blk.4.nextn.*`): `model.gguf`, with llama.cpp's transforms (norms + 1, `-exp(A_log)`, the value heads reordered
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
    mtp_num_hidden_layers=1,
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

# ---- The MTP head (`mtp.*`), as vLLM's Qwen3_5MultiTokenPredictor runs it ----
# transformers drops `mtp.*`; its own decoder layer (full attention) and RMSNorm make the head.
# Built from a forked RNG so that the model and the draws below stay as they were without it.
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm

full = cfg.layer_types.index("full_attention")
with torch.random.fork_rng():
    torch.manual_seed(20261205)
    mtp = torch.nn.ModuleDict(
        {
            "fc": torch.nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False),
            "pre_fc_norm_embedding": Qwen3_5RMSNorm(cfg.hidden_size, cfg.rms_norm_eps),
            "pre_fc_norm_hidden": Qwen3_5RMSNorm(cfg.hidden_size, cfg.rms_norm_eps),
            "norm": Qwen3_5RMSNorm(cfg.hidden_size, cfg.rms_norm_eps),
            "layers": torch.nn.ModuleList([Qwen3_5DecoderLayer(cfg, full)]),
        }
    ).float().eval()
    with torch.no_grad():
        for name, p in mtp.named_parameters():
            if "norm" in name:
                p.copy_(0.1 * torch.randn_like(p))  # (1 + w) norms
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)

state = {k: v.contiguous() for k, v in model.state_dict().items()}
state.update({"mtp." + k: v.contiguous() for k, v in mtp.state_dict().items()})
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



def mtp_rows(embeds, hidden, positions, visible):
    """The head over rows (embedding, hidden, position) in one cache-free pass, row r seeing
    the rows `visible[r]` (itself included): each row's output after `mtp.norm`."""
    with torch.no_grad():
        e = mtp["pre_fc_norm_embedding"](torch.stack(embeds))
        h = mtp["pre_fc_norm_hidden"](torch.stack(hidden))
        x = mtp["fc"](torch.cat([e, h], dim=-1))[None]  # embedding first
        n = len(positions)
        mask = torch.full((1, 1, n, n), float("-inf"))
        for r, seen in enumerate(visible):
            mask[0, 0, r, seen] = 0.0
        pos = torch.tensor([positions])
        rope = model.model.rotary_emb(x, pos[None].expand(3, 1, -1))
        y = mtp["layers"][0](x, position_embeddings=rope, attention_mask=mask, position_ids=pos)
        return mtp["norm"](y)[0]


def mtp_path(first_tokens, path_tokens):
    """The head's first pass over the prompt (row p pairs the target's post-norm hidden h_p with
    the next token, the last row with `first_tokens[-1]`, the root), then a chain fed its own
    outputs and `path_tokens`: (outputs, logits) of every row. Each chain row is computed by a
    cache-free pass over all rows before it."""
    with torch.no_grad():
        g = model.model(input_ids=torch.tensor([prompt]), use_cache=False).last_hidden_state[0]
    emb = model.model.embed_tokens
    embeds = [emb(torch.tensor(t)) for t in first_tokens]
    hidden = [g[p] for p in range(len(prompt))]
    positions = list(range(len(prompt)))
    out = mtp_rows(embeds, hidden, positions, [list(range(r + 1)) for r in range(len(positions))])
    for t in path_tokens:
        embeds.append(emb(torch.tensor(t)))
        hidden.append(out[-1])
        positions.append(positions[-1] + 1)
        out = mtp_rows(embeds, hidden, positions, [list(range(r + 1)) for r in range(len(positions))])
    with torch.no_grad():
        return out, model.lm_head(out)


# The first pass and a greedy chain of four after the root (the token the target gives next).
root = int(prefix[-1].argmax())
first_tokens = prompt[1:] + [root]
chain = []
for _ in range(3):
    _, logits = mtp_path(first_tokens, chain)
    chain.append(int(logits[-1].argmax()))
outs, logits = mtp_path(first_tokens, chain)
# A tree the head grows: node i's parent mtp_parents[i] (-1: the root's row), its logits those of
# the chain along its path.
mtp_parents = [-1, -1, 0, 0, 1, 2, 5, 6]
mtp_tokens = [int(t) for t in torch.randint(0, cfg.vocab_size, (len(mtp_parents),))]


def mtp_node_path(i):
    out = []
    while i >= 0:
        out.append(mtp_tokens[i])
        i = mtp_parents[i]
    return out[::-1]


mtp_nodes = [mtp_path(first_tokens, mtp_node_path(i))[1][-1].tolist() for i in range(len(mtp_parents))]
mtp_golden = {
    "generator": "tests/data/qwen35/generate.py (the head as vLLM's qwen3_5_mtp.py), transformers %s, torch %s"
    % (__import__("transformers").__version__, torch.__version__),
    "prompt": prompt,
    "root": root,
    "first_pass_logits": logits[: len(prompt)].tolist(),
    "first_pass_outputs": outs[: len(prompt)].tolist(),
    "chain": {"tokens": chain, "logits": logits[len(prompt):].tolist()},
    "tree": {"parents": mtp_parents, "tokens": mtp_tokens, "logits": mtp_nodes},
}
with open(os.path.join(here, "mtp_golden.json"), "w") as f:
    json.dump(mtp_golden, f)

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
print("wrote model.safetensors, config.json, golden.json, mtp_golden.json")

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
        "sys.argv = ['convert', %r, '--outfile', %r, '--outtype', 'f32']\n"
        "c.main()\n"
    ) % (os.path.join(llama, "gguf-py"), llama, here, os.path.join(here, "model.gguf"))
    subprocess.run([sys.executable, "-c", wrapper], check=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.remove(os.path.join(here, f))
    print("wrote model.gguf")
