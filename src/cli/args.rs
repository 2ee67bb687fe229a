//! The command line's arguments (clap) and the small helpers its commands share.

use super::*;
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "treespec",
    version,
    about = "Local LLM chat with tree-walk speculative decoding"
)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// The chat's options, when no command is named (`treespec --resume` is `treespec chat
    /// --resume`).
    #[command(flatten)]
    pub(crate) chat: ChatArgs,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// The terminal chat (the default): streams answers, colours accepted draft tokens, draws the
    /// draft tree of each step.
    Chat(ChatArgs),
    /// Answer one prompt, streaming to stdout (plain decoding unless --mode says otherwise).
    Generate(GenerateArgs),
    /// Measure decode speed, tokens per target pass and acceptance per mode and prompt file.
    Bench(BenchArgs),
    /// Fetch known models into the cache (default: the target and drafter pair).
    Fetch(FetchArgs),
    /// Check treespec's own kernels on a device against their CPU references; exits non-zero on
    /// a mismatch.
    Selftest(SelftestArgs),
    /// Write a random-weight GGUF model with a real model's shape and formats (`--shape`),
    /// for timing passes with `bench --costs` where the real weights
    /// cannot be had; what it writes is noise.
    Synth(SynthArgs),
    /// Train an MTP head for a target on the target's own answers (resumes where --out left off);
    /// draft with it by `--drafter OUT`.
    TrainDrafter(TrainArgs),
    /// Write a trained MTP head (the safetensors `train-drafter` saves) as a compact GGUF file,
    /// its matrices quantised; draft with it by `--drafter OUT`.
    ExportHead(ExportArgs),
}

#[derive(Args)]
pub(crate) struct ExportArgs {
    /// The head (safetensors, from `train-drafter`, or a GGUF from `export-head`); its record
    /// beside it (HEAD.json) goes into the file's metadata.
    #[arg(long)]
    pub(crate) head: PathBuf,
    /// Draft among only this many tokens (FR-Spec): the most frequent in the answers of --data,
    /// as `train-drafter --draft-vocab` picks them from its own data (answers it took with
    /// --extra-data not counted); 0: the whole vocabulary. Default: the head's own set, if it has
    /// one (the one it was trained with).
    #[arg(long, requires = "data")]
    pub(crate) draft_vocab: Option<usize>,
    /// The training data file the head was trained on (HEAD.safetensors.data.json), for
    /// --draft-vocab.
    #[arg(long, value_name = "DATA.json", requires = "draft_vocab")]
    pub(crate) data: Option<PathBuf>,
    /// The GGUF file to write.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Format of the head's matrices: q8_0, f16, f32, q4_k, ... (vectors stay f32).
    #[arg(long = "type", default_value = "q8_0")]
    pub(crate) format: String,
    /// The target the head was trained for (as `train-drafter --target`): its shape is checked
    /// and recorded in the file, which is refused for a target of another shape.
    #[arg(long, short = 'm', alias = "model", default_value = "target")]
    pub(crate) target: String,
}

#[derive(Args)]
pub(crate) struct TrainArgs {
    /// The target to train a head for.
    #[arg(long, short = 'm', alias = "model", default_value = "target")]
    pub(crate) target: String,
    /// The head's file (safetensors); its record and data go beside it.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Optimiser steps in all, each on a batch of sequences (--batch-tokens).
    #[arg(long, default_value_t = 2000)]
    pub(crate) steps: usize,
    /// Most positions an optimiser step reads: its sequences side by side, times the longest's
    /// length.
    #[arg(long, default_value_t = 4096)]
    pub(crate) batch_tokens: usize,
    /// GiB of the target's outputs (hidden states and distributions of each sequence, computed
    /// once) kept on the device; sequences past it are read by the target again each time.
    #[arg(long, default_value_t = 8.0)]
    pub(crate) cache_gib: f64,
    /// Start from this head (a GGUF from `export-head`, its matrices dequantised) instead of the
    /// target's last layer, when --out holds no checkpoint yet.
    #[arg(long, value_name = "HEAD.gguf")]
    pub(crate) init: Option<PathBuf>,
    /// Tokens the head drafts among: the most frequent in the training answers (FR-Spec; its LM
    /// head reads only their rows); 0: the whole vocabulary.
    #[arg(long, default_value_t = 32768)]
    pub(crate) draft_vocab: usize,
    /// Feed the head several target layers, fused (EAGLE-3): `eagle3` (the outputs of layers 1,
    /// n/2 - 1, n - 4 and the last) or 0-based layers such as `1,13,27`; default: the last
    /// layer alone. A head from --init that reads the last layer starts as it was.
    #[arg(long, value_name = "LAYERS")]
    pub(crate) feature_layers: Option<String>,
    /// Train a DFlash block drafter instead of a head: LAYERSxBLOCK (`2x16`: two layers,
    /// blocks of 16 tokens), from random weights; --out is then its directory (config.json,
    /// model.safetensors: `--drafter DIR` loads it; a checkpoint there is resumed) and
    /// --feature-layers the target layers it reads (default: the reference's choice for its
    /// layers). --init, --k and --draft-vocab do not apply.
    #[arg(long, value_name = "LxB")]
    pub(crate) dflash: Option<String>,
    /// The token a DFlash drafter's masked positions are embedded as (default: the last token
    /// whose embedding is not zero).
    #[arg(long, value_name = "ID", requires = "dflash")]
    pub(crate) mask_token: Option<u32>,
    /// Start a DFlash drafter's layers as the target's last layers (their matrices and norms;
    /// the target's biases dropped) instead of random weights.
    #[arg(long, requires = "dflash")]
    pub(crate) dflash_from_target: bool,
    /// A DFlash drafter's loss decay over a block's depths, gamma: depth d's rows weigh
    /// exp(-(d - 1) / gamma) (default: 7 for blocks of 16, 5 for 10, 4 for 8, as the reference
    /// trainers; 0: every depth alike).
    #[arg(long, value_name = "GAMMA", requires = "dflash")]
    pub(crate) loss_decay: Option<f64>,
    /// Chain steps the head is trained unrolled for.
    #[arg(long, default_value_t = 3)]
    pub(crate) k: usize,
    /// Learning rate (AdamW; the peak under a schedule).
    #[arg(long, default_value_t = 2e-4)]
    pub(crate) lr: f64,
    /// How the learning rate moves over --steps: `cosine` (a short warm-up, then down to a
    /// tenth of --lr at the last step; set --steps to the run's real length) or `constant`.
    #[arg(long, default_value = "cosine", value_parser = parse_schedule)]
    pub(crate) lr_schedule: treespec::train::LrSchedule,
    /// Prompt files (JSON lines with a "prompt" field; default: the bundled sets).
    #[arg(long, num_args = 1..)]
    pub(crate) data: Vec<PathBuf>,
    /// Data files of earlier runs (HEAD.safetensors.data.json: the target's answers to other
    /// prompts, e.g. from a run with --steps 0) trained on too; this run's own last answers stay
    /// the held-out ones.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub(crate) extra_data: Vec<PathBuf>,
    /// Prompts the target writes itself first (Magpie-style), trained on with its answers (the
    /// bundled sets are the benchmarks' prompts and are never trained on: name prompt files
    /// with --data, or ask for these).
    #[arg(long, default_value_t = 0)]
    pub(crate) self_prompts: usize,
    /// A system prompt that steers the self-written prompts (as Magpie steers its queries);
    /// repeat it for several, which share the prompts out evenly. Default: eight built-in ones
    /// (writing, role-play, reasoning, maths, code, extraction, STEM, humanities).
    #[arg(long, value_name = "TEXT")]
    pub(crate) self_prompt_system: Vec<String>,
    /// Turns each conversation is taken to (1-4) while it fits the trained length: after the
    /// first, the target writes a follow-up as the user (steered to follow-up questions and
    /// requests) and answers it; each turn is trained on from its answer, the conversation
    /// before it as context.
    #[arg(long, default_value_t = 1)]
    pub(crate) turns: usize,
    /// Measure the head as it trains on prompt sets it never trains on (JSON lines; 16 of each,
    /// its categories taking turns, figures by category too): `--eval` alone takes the bundled
    /// humaneval, gsm8k, chat and heldout sets.
    #[arg(long, num_args = 0.., value_name = "FILE")]
    pub(crate) eval: Option<Vec<PathBuf>>,
    /// Most new tokens of each answer the target writes to train on.
    #[arg(long, default_value_t = 256)]
    pub(crate) answer_tokens: usize,
    /// Seed of the order of the training sequences, and of the text the target samples
    /// (self-written prompts, follow-ups): a resume of such a run takes the same seed.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
}

#[derive(Args)]
pub(crate) struct SynthArgs {
    /// The shape: qwen2.5-1.5b, qwen2.5-0.5b, qwen3-8b, qwen3-32b, qwen3.6-27b-dense, or the
    /// hybrids qwen3.6-27b and qwen3.5-0.8b.
    #[arg(long)]
    pub(crate) shape: String,
    /// Copy the tokenizer of this real GGUF model (its vocabulary's size then sets the
    /// embedding's and LM head's rows), so that llama.cpp loads the file too and speeds can be
    /// compared on the same file.
    #[arg(long)]
    pub(crate) tokenizer_from: Option<PathBuf>,
    /// The GGUF file to write (with --dflash: the directory).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Seed of the random bytes.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Write a DFlash drafter for a target of this shape instead (shaped like z-lab's: five
    /// Qwen3 layers of the target's width, blocks of 16; bf16 safetensors in a directory).
    #[arg(long)]
    pub(crate) dflash: bool,
}

#[derive(Args)]
pub(crate) struct SelftestArgs {
    /// Where to run: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cuda")]
    pub(crate) device: String,
    /// Also check the GPU decoder step on these models (names or GGUF paths) against candle's
    /// ops and for batch invariance.
    #[arg(long = "model", short = 'm')]
    pub(crate) models: Vec<String>,
    /// Also check this MTP head (a GGUF file from `export-head`, or `mtp`: the model's own) on
    /// the GPU step against candle's ops, over the first model given with -m.
    #[arg(long)]
    pub(crate) head: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct RuntimeArgs {
    /// Where to run: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub(crate) device: String,
    /// Where a causal-LM drafter runs: cpu, cuda or cuda:N (default: the target's device; on a
    /// GPU on its own stream, drafting the next step while the target verifies this one).
    #[arg(long)]
    pub(crate) drafter_device: Option<String>,
    /// KV cache capacity in tokens.
    #[arg(long, default_value_t = 4096)]
    pub(crate) context: usize,
    /// Dequantise every weight to f32 (slow; for exact comparisons between modes).
    #[arg(long)]
    pub(crate) exact: bool,
    /// On a GPU, verify passes of 16+ rows (big trees; a calibration's crossover where `bench
    /// --costs --calibrate` measured one) through cuBLAS on f16 copies of the weights: several
    /// times faster, but exact to `ar` only up to f16's rounding (a prompt's passes take this
    /// path either way; TREESPEC_WIDE_ROWS sets the rows, 0 turns it off).
    #[arg(long)]
    pub(crate) wide_verify: bool,
}

#[derive(Args)]
pub(crate) struct DecodeArgs {
    /// Tree nodes per step in `tree` mode (the root not counted).
    #[arg(long, default_value_t = DEFAULT_BUDGET)]
    pub(crate) budget: usize,
    /// Tree depth in `tree` mode.
    #[arg(long, default_value_t = DEFAULT_DEPTH)]
    pub(crate) depth: usize,
    /// Drafted tokens per step in `linear` mode.
    #[arg(long, default_value_t = DEFAULT_GAMMA)]
    pub(crate) gamma: usize,
    /// The MTP head's chain length (k) in `mtp` mode.
    #[arg(long, default_value_t = treespec::engine::DEFAULT_MTP_K)]
    pub(crate) mtp_k: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f32,
    /// Nucleus sampling mass (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) top_p: f32,
    /// Keep only the k most likely tokens (0: off).
    #[arg(long, default_value_t = 0)]
    pub(crate) top_k: usize,
    /// Sampler seed.
    #[arg(long, default_value_t = 299_792_458)]
    pub(crate) seed: u64,
    /// A causal drafter's chain stops once its own probability of the chain falls below this
    /// (0: always draft the full depth).
    #[arg(long, default_value_t = treespec::engine::DEFAULT_MIN_CHAIN_PROB)]
    pub(crate) min_chain_prob: f32,
    /// `tree` with a causal drafter: 0 builds the DDTree from the drafter's greedy chain; W > 0
    /// lets the drafter grow the tree, expanding the W most probable nodes of each depth.
    #[arg(long, default_value_t = treespec::engine::DEFAULT_EXPAND)]
    pub(crate) expand: usize,
}

impl DecodeArgs {
    /// The decoding settings these arguments give for `mode` (checked against their limits).
    pub(crate) fn settings(&self, mode: Mode) -> anyhow::Result<Settings> {
        let s = Settings {
            mode,
            budget: self.budget,
            depth: self.depth,
            gamma: self.gamma,
            mtp_k: self.mtp_k,
            sampling: SamplingParams {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
            },
            min_chain_prob: self.min_chain_prob,
            expand: self.expand,
            ..Settings::default()
        };
        s.validate()?;
        Ok(s)
    }
}

/// The MTP head beside the drafter (chat, generate, bench).
#[derive(Args, Default)]
pub(crate) struct HeadArg {
    /// An MTP head beside the drafter, for `mtp` (a `.gguf` from `treespec export-head` or a
    /// `.safetensors` from `train-drafter`), or `none` (default: the chat's config file, else
    /// the head shipped for the default target when the target is the default target).
    #[arg(long)]
    pub(crate) head: Option<String>,
}

#[derive(Args)]
pub(crate) struct GenerateArgs {
    /// The target: a GGUF file, a checkpoint directory, a hub id (org/name or org/name:file), or
    /// a known model (target, drafter, smollm2; fetched if missing).
    #[arg(long, short = 'm', alias = "target", default_value = "target")]
    pub(crate) model: String,
    /// The drafter for `linear`, `tree` and `mtp`: a model, a DFlash checkpoint, or `mtp` for
    /// the target's own multi-token-prediction head (default: the default drafter when the
    /// target is the default target; the target's MTP head when it has one).
    #[arg(long)]
    pub(crate) drafter: Option<String>,
    #[command(flatten)]
    pub(crate) head: HeadArg,
    /// Decoding mode: ar, linear, tree, mtp, auto.
    #[arg(long, default_value = "ar")]
    pub(crate) mode: String,
    /// The user's message.
    #[arg(long, short = 'p')]
    pub(crate) prompt: String,
    /// A system prompt (otherwise the template's default).
    #[arg(long)]
    pub(crate) system: Option<String>,
    /// Feed the prompt as is, without the chat template.
    #[arg(long)]
    pub(crate) raw: bool,
    /// Most new tokens.
    #[arg(long, default_value_t = 256)]
    pub(crate) max_tokens: usize,
    #[command(flatten)]
    pub(crate) decode: DecodeArgs,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
}

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// The target model.
    #[arg(long, default_value = "target")]
    pub(crate) target: String,
    /// The drafter: a model, a head file, a DFlash checkpoint, `mtp` for the target's own MTP
    /// head, or `none` (`mtp` then drafts with --head alone). Default: as the chat picks one, the
    /// default drafter for the default target and a target's own head where it has one;
    /// `--costs`: the default drafter.
    #[arg(long)]
    pub(crate) drafter: Option<String>,
    #[command(flatten)]
    pub(crate) head: HeadArg,
    /// Prompt files (JSON lines with a "prompt" field), each reported separately (default: the
    /// bundled humaneval, gsm8k and chat sets).
    #[arg(long, num_args = 1..)]
    pub(crate) prompts: Vec<PathBuf>,
    /// Configurations to compare, comma-separated: ar, linear, tree, mtp, auto (shaped by --gamma,
    /// --budget, --depth), or shaped here: linear:GAMMA, mtp:K, tree:BUDGETxDEPTH, tree:BxLwW (a tree
    /// the drafter grows, W nodes per depth); @P after any of them stops chains below confidence
    /// P. ar always runs: speedups are ratios to it.
    #[arg(long, default_value = "ar,linear,tree")]
    pub(crate) modes: String,
    /// New tokens per prompt.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_tokens: usize,
    /// Only the first K prompts of each file.
    #[arg(long)]
    pub(crate) limit: Option<usize>,
    /// Report each category of a prompt file whose lines carry a "category" (the bundled
    /// heldout set: writing, roleplay, reasoning, maths, code, extraction, STEM, humanities) as
    /// a set of its own.
    #[arg(long)]
    pub(crate) by_category: bool,
    /// Write the full numbers as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Only time the passes speculation is made of (target step, verify pass per block size,
    /// LM head, drafter step) and exit.
    #[arg(long)]
    pub(crate) costs: bool,
    /// With --costs, the verify pass's block sizes to time.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,9,16,32,64,128,256,1024",
        requires = "costs"
    )]
    pub(crate) cost_rows: Vec<usize>,
    /// With --costs, the context (tokens already in the cache) every pass is timed after.
    #[arg(long, default_value_t = 256, requires = "costs")]
    pub(crate) cost_prefix: usize,
    /// With --costs, time verify passes of 4 to 64 rows through the quantised kernels and through
    /// cuBLAS on this GPU, and record for this GPU and the target's shape the row count from
    /// which cuBLAS wins (in the cache directory; read at every later load).
    #[arg(long, requires = "costs")]
    pub(crate) calibrate: bool,
    /// Only time the GPU's quantised products (dp4a against tensor cores) on the shapes of
    /// Qwen2.5-1.5B's matrices with random weights, and exit (needs a CUDA build and device).
    #[arg(long)]
    pub(crate) products: bool,
    /// At temperature 0, exit with an error when any mode's output differs from `ar`'s (always
    /// on with --exact).
    #[arg(long)]
    pub(crate) require_identical: bool,
    #[command(flatten)]
    pub(crate) decode: DecodeArgs,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
}

#[derive(Args, Default)]
pub(crate) struct ChatArgs {
    /// The target model (default: config file, else the default target).
    #[arg(long, short = 'm', alias = "model")]
    pub(crate) target: Option<String>,
    /// The drafter, or `none` (default: config file, else the default drafter).
    #[arg(long)]
    pub(crate) drafter: Option<String>,
    #[command(flatten)]
    pub(crate) head: HeadArg,
    /// Starting mode: ar, linear, tree, mtp, auto (default: mtp where an MTP head is given with
    /// --head or shipped for the target, as for the default target; else tree).
    #[arg(long)]
    pub(crate) mode: Option<String>,
    /// Tree budget.
    #[arg(long)]
    pub(crate) budget: Option<usize>,
    /// Tree depth.
    #[arg(long)]
    pub(crate) depth: Option<usize>,
    /// Chain length in linear mode.
    #[arg(long)]
    pub(crate) gamma: Option<usize>,
    /// The MTP head's chain length (k) in mtp mode.
    #[arg(long)]
    pub(crate) mtp_k: Option<usize>,
    /// Temperature (0: greedy).
    #[arg(long)]
    pub(crate) temperature: Option<f32>,
    /// Nucleus sampling mass.
    #[arg(long)]
    pub(crate) top_p: Option<f32>,
    /// Top-k.
    #[arg(long)]
    pub(crate) top_k: Option<usize>,
    /// A causal drafter's chain stops once its own probability of the chain falls below this.
    #[arg(long)]
    pub(crate) min_chain_prob: Option<f32>,
    /// `tree` with a causal drafter: W > 0 lets the drafter grow the tree, expanding the W most
    /// probable nodes of each depth (0: the DDTree over the greedy chain).
    #[arg(long)]
    pub(crate) expand: Option<usize>,
    /// Sampler seed.
    #[arg(long, default_value_t = 299_792_458)]
    pub(crate) seed: u64,
    /// Token limit per answer.
    #[arg(long)]
    pub(crate) max_tokens: Option<usize>,
    /// Theme name (dark, light, high-contrast, or one of yours).
    #[arg(long)]
    pub(crate) theme: Option<String>,
    /// Continue a saved chat (default: the most recent one).
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    pub(crate) resume: Option<String>,
    /// Where to run: cpu, cuda or cuda:N.
    #[arg(long)]
    pub(crate) device: Option<String>,
    /// Where a causal-LM drafter runs (default: the target's device; on a GPU its own stream).
    #[arg(long)]
    pub(crate) drafter_device: Option<String>,
    /// KV cache capacity in tokens (default: the model's own context, as much of it as half the
    /// memory beside the weights holds, at least 4096).
    #[arg(long)]
    pub(crate) context: Option<usize>,
    /// Dequantise every weight to f32.
    #[arg(long)]
    pub(crate) exact: bool,
    /// On a GPU, verify big trees (16+ rows, or the calibrated crossover) through cuBLAS:
    /// faster, exact to `ar` only up to f16's rounding.
    #[arg(long)]
    pub(crate) wide_verify: bool,
    /// Show the interface with a scripted engine and no model.
    #[arg(long)]
    pub(crate) demo: bool,
}

#[derive(Args)]
pub(crate) struct FetchArgs {
    /// Known models to fetch: target, drafter, smollm2 (default: target drafter).
    pub(crate) models: Vec<String>,
    /// Fetch every known model.
    #[arg(long)]
    pub(crate) all: bool,
}

impl RuntimeArgs {
    /// How to load models: device, context, exactness and the wide verify passes.
    pub(crate) fn load_options(&self) -> anyhow::Result<LoadOptions> {
        let drafter_device = self
            .drafter_device
            .as_deref()
            .map(device::parse_device)
            .transpose()?;
        Ok(LoadOptions {
            device: device::parse_device(&self.device)?,
            exact: self.exact,
            context: self.context,
            drafter_device,
            wide_verify: self.wide_verify,
            ..LoadOptions::default()
        })
    }
}

/// Load the target (and the drafter and the MTP head, when given) into an engine.
pub(crate) fn build_engine(
    target: &str,
    (drafter, head): (DrafterChoice, Option<&str>),
    settings: Settings,
    seed: u64,
    rt: &RuntimeArgs,
) -> anyhow::Result<(Engine, TextSide)> {
    Ok(load::build_engine(
        target,
        drafter,
        head,
        settings,
        seed,
        &rt.load_options()?,
    )?)
}

/// A mode's name (ar, linear, tree, mtp, auto), or an error naming the choices.
pub(crate) fn parse_mode(s: &str) -> anyhow::Result<Mode> {
    Mode::parse(s).ok_or_else(|| anyhow::anyhow!("unknown mode `{s}` (ar, linear, tree, mtp)"))
}

/// `--lr-schedule`'s value.
pub(crate) fn parse_schedule(s: &str) -> Result<treespec::train::LrSchedule, String> {
    treespec::train::LrSchedule::parse(s).ok_or_else(|| format!("`{s}`: use cosine or constant"))
}
