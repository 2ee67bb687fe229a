//! The `treespec` command line.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use treespec::bench::{self, BenchConfig};
use treespec::draft::Drafter;
use treespec::engine::{Engine, Mode, Settings, DEFAULT_BUDGET, DEFAULT_DEPTH, DEFAULT_GAMMA};
use treespec::generate::generate;
use treespec::load::{self, DrafterChoice, TextSide};
use treespec::model::chat_template::{ChatMessage, Role};
use treespec::model::recommended::{self, RecommendedSampling};
use treespec::model::LoadOptions;
use treespec::sampling::SamplingParams;
use treespec::{device, fetch};

#[derive(Parser)]
#[command(
    name = "treespec",
    version,
    about = "Local LLM chat with tree-walk speculative decoding"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The chat's options, when no command is named (`treespec --resume` is `treespec chat
    /// --resume`).
    #[command(flatten)]
    chat: ChatArgs,
}

#[derive(Subcommand)]
enum Command {
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
struct ExportArgs {
    /// The head (safetensors, from `train-drafter`, or a GGUF from `export-head`); its record
    /// beside it (HEAD.json) goes into the file's metadata.
    #[arg(long)]
    head: PathBuf,
    /// Draft among only this many tokens (FR-Spec): the most frequent in the answers of --data,
    /// as `train-drafter --draft-vocab` picks them from its own data (answers it took with
    /// --extra-data not counted); 0: the whole vocabulary. Default: the head's own set, if it has
    /// one (the one it was trained with).
    #[arg(long, requires = "data")]
    draft_vocab: Option<usize>,
    /// The training data file the head was trained on (HEAD.safetensors.data.json), for
    /// --draft-vocab.
    #[arg(long, value_name = "DATA.json", requires = "draft_vocab")]
    data: Option<PathBuf>,
    /// The GGUF file to write.
    #[arg(long)]
    out: PathBuf,
    /// Format of the head's matrices: q8_0, f16, f32, q4_k, ... (vectors stay f32).
    #[arg(long = "type", default_value = "q8_0")]
    format: String,
    /// The target the head was trained for (as `train-drafter --target`): its shape is checked
    /// and recorded in the file, which is refused for a target of another shape.
    #[arg(long, short = 'm', alias = "model", default_value = "target")]
    target: String,
}

#[derive(Args)]
struct TrainArgs {
    /// The target to train a head for.
    #[arg(long, short = 'm', alias = "model", default_value = "target")]
    target: String,
    /// The head's file (safetensors); its record and data go beside it.
    #[arg(long)]
    out: PathBuf,
    /// Optimiser steps in all, each on a batch of sequences (--batch-tokens).
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Most positions an optimiser step reads: its sequences side by side, times the longest's
    /// length.
    #[arg(long, default_value_t = 4096)]
    batch_tokens: usize,
    /// GiB of the target's outputs (hidden states and distributions of each sequence, computed
    /// once) kept on the device; sequences past it are read by the target again each time.
    #[arg(long, default_value_t = 8.0)]
    cache_gib: f64,
    /// Start from this head (a GGUF from `export-head`, its matrices dequantised) instead of the
    /// target's last layer, when --out holds no checkpoint yet.
    #[arg(long, value_name = "HEAD.gguf")]
    init: Option<PathBuf>,
    /// Tokens the head drafts among: the most frequent in the training answers (FR-Spec; its LM
    /// head reads only their rows); 0: the whole vocabulary.
    #[arg(long, default_value_t = 32768)]
    draft_vocab: usize,
    /// Chain steps the head is trained unrolled for.
    #[arg(long, default_value_t = 3)]
    k: usize,
    /// Learning rate (AdamW; the peak under a schedule).
    #[arg(long, default_value_t = 2e-4)]
    lr: f64,
    /// How the learning rate moves over --steps: `cosine` (a short warm-up, then down to a
    /// tenth of --lr at the last step; set --steps to the run's real length) or `constant`.
    #[arg(long, default_value = "cosine", value_parser = parse_schedule)]
    lr_schedule: treespec::train::LrSchedule,
    /// Prompt files (JSON lines with a "prompt" field; default: the bundled sets).
    #[arg(long, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Data files of earlier runs (HEAD.safetensors.data.json: the target's answers to other
    /// prompts, e.g. from a run with --steps 0) trained on too; this run's own last answers stay
    /// the held-out ones.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    extra_data: Vec<PathBuf>,
    /// Prompts the target writes itself first (Magpie-style), trained on with its answers; with
    /// them the bundled sets (the benchmark's prompts) are left out unless given with --data.
    #[arg(long, default_value_t = 0)]
    self_prompts: usize,
    /// A system prompt that steers the self-written prompts (as Magpie steers its queries);
    /// repeat it for several, which share the prompts out evenly. Default: four built-in ones
    /// (code, maths, everyday help and writing, knowledge).
    #[arg(long, value_name = "TEXT")]
    self_prompt_system: Vec<String>,
    /// Measure the head as it trains on prompt sets it never trains on (JSON lines; the first 16
    /// of each): `--eval` alone takes the bundled humaneval, gsm8k and chat sets.
    #[arg(long, num_args = 0.., value_name = "FILE")]
    eval: Option<Vec<PathBuf>>,
    /// Most new tokens of each answer the target writes to train on.
    #[arg(long, default_value_t = 256)]
    answer_tokens: usize,
    /// Seed of the order of the training sequences.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args)]
struct SynthArgs {
    /// The shape: qwen2.5-1.5b, qwen2.5-0.5b, qwen3-8b, qwen3-32b, qwen3.6-27b-dense, or the
    /// hybrids qwen3.6-27b and qwen3.5-0.8b.
    #[arg(long)]
    shape: String,
    /// Copy the tokenizer of this real GGUF model (its vocabulary's size then sets the
    /// embedding's and LM head's rows), so that llama.cpp loads the file too and speeds can be
    /// compared on the same file.
    #[arg(long)]
    tokenizer_from: Option<PathBuf>,
    /// The GGUF file to write (with --dflash: the directory).
    #[arg(long)]
    out: PathBuf,
    /// Seed of the random bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write a DFlash drafter for a target of this shape instead (shaped like z-lab's: five
    /// Qwen3 layers of the target's width, blocks of 16; bf16 safetensors in a directory).
    #[arg(long)]
    dflash: bool,
}

#[derive(Args)]
struct SelftestArgs {
    /// Where to run: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Also check the GPU decoder step on these models (names or GGUF paths) against candle's
    /// ops and for batch invariance.
    #[arg(long = "model", short = 'm')]
    models: Vec<String>,
    /// Also check this MTP head (a GGUF file from `export-head`) on the GPU step against
    /// candle's ops, over the first model given with -m.
    #[arg(long)]
    head: Option<PathBuf>,
}

#[derive(Args)]
struct RuntimeArgs {
    /// Where to run: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Where a causal-LM drafter runs: cpu, cuda or cuda:N (default: the target's device; on a
    /// GPU on its own stream, drafting the next step while the target verifies this one).
    #[arg(long)]
    drafter_device: Option<String>,
    /// KV cache capacity in tokens.
    #[arg(long, default_value_t = 4096)]
    context: usize,
    /// Dequantise every weight to f32 (slow; for exact comparisons between modes).
    #[arg(long)]
    exact: bool,
    /// On a GPU, verify passes of 16+ rows (big trees; a calibration's crossover where `bench
    /// --costs --calibrate` measured one) through cuBLAS on f16 copies of the weights: several
    /// times faster, but exact to `ar` only up to f16's rounding (a prompt's passes take this
    /// path either way; TREESPEC_WIDE_ROWS sets the rows, 0 turns it off).
    #[arg(long)]
    wide_verify: bool,
}

#[derive(Args)]
struct DecodeArgs {
    /// Tree nodes per step in `tree` mode (the root not counted).
    #[arg(long, default_value_t = DEFAULT_BUDGET)]
    budget: usize,
    /// Tree depth in `tree` mode.
    #[arg(long, default_value_t = DEFAULT_DEPTH)]
    depth: usize,
    /// Drafted tokens per step in `linear` mode.
    #[arg(long, default_value_t = DEFAULT_GAMMA)]
    gamma: usize,
    /// The MTP head's chain length (k) in `mtp` mode.
    #[arg(long, default_value_t = treespec::engine::DEFAULT_MTP_K)]
    mtp_k: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus sampling mass (1: off).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Keep only the k most likely tokens (0: off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Sampler seed.
    #[arg(long, default_value_t = 299_792_458)]
    seed: u64,
    /// A causal drafter's chain stops once its own probability of the chain falls below this
    /// (0: always draft the full depth).
    #[arg(long, default_value_t = treespec::engine::DEFAULT_MIN_CHAIN_PROB)]
    min_chain_prob: f32,
    /// `tree` with a causal drafter: 0 builds the DDTree from the drafter's greedy chain; W > 0
    /// lets the drafter grow the tree, expanding the W most probable nodes of each depth.
    #[arg(long, default_value_t = treespec::engine::DEFAULT_EXPAND)]
    expand: usize,
}

impl DecodeArgs {
    fn settings(&self, mode: Mode) -> anyhow::Result<Settings> {
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
struct HeadArg {
    /// An MTP head beside the drafter, for `mtp` (a `.gguf` from `treespec export-head` or a
    /// `.safetensors` from `train-drafter`), or `none` (default: the chat's config file, else
    /// the head shipped for the default target when the target is the default target).
    #[arg(long)]
    head: Option<String>,
}

#[derive(Args)]
struct GenerateArgs {
    /// The target: a GGUF file, a checkpoint directory, a hub id (org/name or org/name:file), or
    /// a known model (target, drafter, smollm2; fetched if missing).
    #[arg(long, short = 'm', alias = "target", default_value = "target")]
    model: String,
    /// The drafter for `linear`, `tree` and `mtp`: a model, a DFlash checkpoint, or `mtp` for
    /// the target's own multi-token-prediction head (default: the default drafter when the
    /// target is the default target; the target's MTP head when it has one).
    #[arg(long)]
    drafter: Option<String>,
    #[command(flatten)]
    head: HeadArg,
    /// Decoding mode: ar, linear, tree, mtp, auto.
    #[arg(long, default_value = "ar")]
    mode: String,
    /// The user's message.
    #[arg(long, short = 'p')]
    prompt: String,
    /// A system prompt (otherwise the template's default).
    #[arg(long)]
    system: Option<String>,
    /// Feed the prompt as is, without the chat template.
    #[arg(long)]
    raw: bool,
    /// Most new tokens.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    #[command(flatten)]
    decode: DecodeArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args)]
struct BenchArgs {
    /// The target model.
    #[arg(long, default_value = "target")]
    target: String,
    /// The drafter model.
    #[arg(long, default_value = "drafter")]
    drafter: String,
    #[command(flatten)]
    head: HeadArg,
    /// Prompt files (JSON lines with a "prompt" field), each reported separately (default: the
    /// bundled humaneval, gsm8k and chat sets).
    #[arg(long, num_args = 1..)]
    prompts: Vec<PathBuf>,
    /// Configurations to compare, comma-separated: ar, linear, tree, mtp, auto (shaped by --gamma,
    /// --budget, --depth), or shaped here: linear:GAMMA, mtp:K, tree:BUDGETxDEPTH, tree:BxLwW (a tree
    /// the drafter grows, W nodes per depth); @P after any of them stops chains below confidence
    /// P. ar always runs: speedups are ratios to it.
    #[arg(long, default_value = "ar,linear,tree")]
    modes: String,
    /// New tokens per prompt.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Only the first K prompts of each file.
    #[arg(long)]
    limit: Option<usize>,
    /// Write the full numbers as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only time the passes speculation is made of (target step, verify pass per block size,
    /// LM head, drafter step) and exit.
    #[arg(long)]
    costs: bool,
    /// With --costs, the verify pass's block sizes to time.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,9,16,32,64,128,256,1024",
        requires = "costs"
    )]
    cost_rows: Vec<usize>,
    /// With --costs, the context (tokens already in the cache) every pass is timed after.
    #[arg(long, default_value_t = 256, requires = "costs")]
    cost_prefix: usize,
    /// With --costs, time verify passes of 4 to 64 rows through the quantised kernels and through
    /// cuBLAS on this GPU, and record for this GPU and the target's shape the row count from
    /// which cuBLAS wins (in the cache directory; read at every later load).
    #[arg(long, requires = "costs")]
    calibrate: bool,
    /// Only time the GPU's quantised products (dp4a against tensor cores) on the shapes of
    /// Qwen2.5-1.5B's matrices with random weights, and exit (needs a CUDA build and device).
    #[arg(long)]
    products: bool,
    /// At temperature 0, exit with an error when any mode's output differs from `ar`'s (always
    /// on with --exact).
    #[arg(long)]
    require_identical: bool,
    #[command(flatten)]
    decode: DecodeArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args, Default)]
struct ChatArgs {
    /// The target model (default: config file, else the default target).
    #[arg(long, short = 'm', alias = "model")]
    target: Option<String>,
    /// The drafter, or `none` (default: config file, else the default drafter).
    #[arg(long)]
    drafter: Option<String>,
    #[command(flatten)]
    head: HeadArg,
    /// Starting mode: ar, linear, tree, mtp, auto (default: mtp where an MTP head is given with
    /// --head or shipped for the target, as for the default target; else tree).
    #[arg(long)]
    mode: Option<String>,
    /// Tree budget.
    #[arg(long)]
    budget: Option<usize>,
    /// Tree depth.
    #[arg(long)]
    depth: Option<usize>,
    /// Chain length in linear mode.
    #[arg(long)]
    gamma: Option<usize>,
    /// The MTP head's chain length (k) in mtp mode.
    #[arg(long)]
    mtp_k: Option<usize>,
    /// Temperature (0: greedy).
    #[arg(long)]
    temperature: Option<f32>,
    /// Nucleus sampling mass.
    #[arg(long)]
    top_p: Option<f32>,
    /// Top-k.
    #[arg(long)]
    top_k: Option<usize>,
    /// A causal drafter's chain stops once its own probability of the chain falls below this.
    #[arg(long)]
    min_chain_prob: Option<f32>,
    /// `tree` with a causal drafter: W > 0 lets the drafter grow the tree, expanding the W most
    /// probable nodes of each depth (0: the DDTree over the greedy chain).
    #[arg(long)]
    expand: Option<usize>,
    /// Sampler seed.
    #[arg(long, default_value_t = 299_792_458)]
    seed: u64,
    /// Token limit per answer.
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Theme name (dark, light, high-contrast, or one of yours).
    #[arg(long)]
    theme: Option<String>,
    /// Continue a saved chat (default: the most recent one).
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    resume: Option<String>,
    /// Where to run: cpu, cuda or cuda:N.
    #[arg(long)]
    device: Option<String>,
    /// Where a causal-LM drafter runs (default: the target's device; on a GPU its own stream).
    #[arg(long)]
    drafter_device: Option<String>,
    /// KV cache capacity in tokens.
    #[arg(long)]
    context: Option<usize>,
    /// Dequantise every weight to f32.
    #[arg(long)]
    exact: bool,
    /// On a GPU, verify big trees (16+ rows, or the calibrated crossover) through cuBLAS:
    /// faster, exact to `ar` only up to f16's rounding.
    #[arg(long)]
    wide_verify: bool,
    /// Show the interface with a scripted engine and no model.
    #[arg(long)]
    demo: bool,
}

#[derive(Args)]
struct FetchArgs {
    /// Known models to fetch: target, drafter, smollm2 (default: target drafter).
    models: Vec<String>,
    /// Fetch every known model.
    #[arg(long)]
    all: bool,
}

impl RuntimeArgs {
    fn load_options(&self) -> anyhow::Result<LoadOptions> {
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
fn build_engine(
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

fn parse_mode(s: &str) -> anyhow::Result<Mode> {
    Mode::parse(s).ok_or_else(|| anyhow::anyhow!("unknown mode `{s}` (ar, linear, tree, mtp)"))
}

fn run_generate(a: GenerateArgs) -> anyhow::Result<()> {
    let mode = parse_mode(&a.mode)?;
    let settings = a.decode.settings(mode)?;
    // The head only where it drafts: `mtp`, and `auto` among its arms.
    let head = match mode {
        Mode::Mtp | Mode::Auto => load::head_for(&a.model, a.head.head.as_deref()),
        _ => None,
    };
    let drafter = match (&a.drafter, mode) {
        (Some(d), _) => DrafterChoice::Named(d),
        // `mtp` with a head needs no other drafter.
        (None, Mode::Mtp) if head.is_some() => DrafterChoice::None,
        (None, Mode::Mtp) => anyhow::bail!(
            "--mode mtp needs an MTP head: --head FILE, or --drafter mtp for the target's own"
        ),
        // The target's own head, or a drafter of its vocabulary already in the cache.
        (None, m) if m.uses_drafter() => DrafterChoice::Auto,
        (None, _) => DrafterChoice::None,
    };
    let (mut engine, m) = build_engine(
        &a.model,
        (drafter, head.as_deref()),
        settings,
        a.decode.seed,
        &a.runtime,
    )?;
    let text = if a.raw {
        a.prompt.clone()
    } else {
        let mut msgs = vec![];
        if let Some(s) = &a.system {
            msgs.push(ChatMessage::new(Role::System, s.clone()));
        }
        msgs.push(ChatMessage::new(Role::User, a.prompt.clone()));
        m.template.render(&msgs, true)?
    };
    for n in &m.notes {
        eprintln!("treespec: {n}");
    }
    let ids = m.tokenizer.encode(&text, true)?;
    let mut stdout = std::io::stdout().lock();
    let (_, stats) = generate(&mut engine, &m.tokenizer, &ids, a.max_tokens, |piece| {
        let _ = stdout.write_all(piece.as_bytes());
        let _ = stdout.flush();
    })?;
    let _ = writeln!(stdout);
    drop(stdout);
    eprintln!(
        "[{} {}, {}] {}",
        m.name,
        mode,
        engine.target().runtime(),
        stats.summary()
    );
    Ok(())
}

#[cfg(feature = "cuda")]
fn run_products(a: &BenchArgs) -> anyhow::Result<()> {
    let opts = a.runtime.load_options()?;
    let candle_core::Device::Cuda(dev) = &opts.device else {
        anyhow::bail!("--products times GPU kernels: pass --device cuda");
    };
    print!("{}", treespec::gpu::products::bench_products(dev)?);
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn run_products(_: &BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "--products times GPU kernels: this build has no CUDA (build with --features cuda)"
    )
}

fn run_costs(a: &BenchArgs) -> anyhow::Result<()> {
    if a.cost_rows.contains(&0) {
        anyhow::bail!("--cost-rows: a verify pass has at least one row");
    }
    let opts = a.runtime.load_options()?;
    let mut t = load::load_model(&a.target, &opts)?;
    let prefix = a.cost_prefix;
    if prefix == 0 || prefix >= t.decoder.context() {
        anyhow::bail!(
            "--cost-prefix {prefix}: the context holds {} tokens (raise it with --context)",
            t.decoder.context()
        );
    }
    if a.calibrate {
        return calibrate_wide(&mut t, &a.runtime.device, prefix);
    }
    if let Some(dir) = load::dflash_dir(&load::model_path(&a.drafter)?)? {
        return dflash_costs(a, &mut t, &dir, &opts);
    }
    // As a drafter runs (`load::load_drafter`): its products on dp4a unless told otherwise.
    let as_drafter = LoadOptions {
        tensor_cores: treespec::gpu::step::tensor_cores_for(true),
        ..opts.clone()
    };
    let mut d = load::load_model(&a.drafter, &as_drafter)?;
    let rows = bench::measure_costs(
        &mut t.decoder,
        Some(&mut d.decoder),
        prefix,
        &a.cost_rows,
        7,
    )?;
    let header = format!(
        "target {} ({}), drafter {}, device {}, context {prefix} tokens",
        t.name,
        t.decoder.runtime(),
        d.name,
        a.runtime.device
    );
    print_costs(a, &header, &rows)
}

/// A cost table under its header line, and as JSON where `--json` asks.
fn print_costs(a: &BenchArgs, header: &str, rows: &[bench::CostRow]) -> anyhow::Result<()> {
    println!("{header}\n");
    println!("{}", bench::costs_markdown(rows));
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(rows)?)?;
    }
    Ok(())
}

/// `bench --costs` with a DFlash drafter: the target's decode step and verify passes, then a
/// DDTree round's pieces with that drafter (`bench::measure_dflash_costs`).
fn dflash_costs(
    a: &BenchArgs,
    t: &mut treespec::model::LoadedModel,
    dir: &std::path::Path,
    opts: &LoadOptions,
) -> anyhow::Result<()> {
    let mut d = load::load_dflash(dir, t, opts)?;
    let prefix = a.cost_prefix;
    let mut rows = bench::measure_costs(&mut t.decoder, None, prefix, &a.cost_rows, 7)?;
    let step = rows.first().map_or(1.0, |r| r.ms);
    rows.extend(bench::measure_dflash_costs(
        &mut t.decoder,
        &mut d,
        prefix,
        &a.cost_rows,
        (step, 7),
    )?);
    let header = format!(
        "target {} ({}), DFlash drafter {} ({} layers, blocks of {}), device {}, context {prefix} tokens, rounds committing {} positions",
        t.name,
        t.decoder.runtime(),
        d.name(),
        d.config().model.n_layers,
        d.config().block_size,
        a.runtime.device,
        bench::ROUND_COMMITS
    );
    print_costs(a, &header, &rows)
}

/// `bench --costs --calibrate`: verify passes of 4 to 64 rows timed through the quantised kernels
/// and through cuBLAS after `prefix` tokens, the crossover chosen from them recorded for this GPU
/// and the target's shape (`gpu::crossover`).
fn calibrate_wide(
    t: &mut treespec::model::LoadedModel,
    device: &str,
    prefix: usize,
) -> anyhow::Result<()> {
    use treespec::gpu::crossover;
    let dev = t.decoder.device().clone();
    let Some(gpu) = treespec::device::gpu_name(&dev) else {
        anyhow::bail!("--calibrate: {device} is not a GPU");
    };
    if !t.decoder.set_wide_from(usize::MAX) {
        anyhow::bail!(
            "--calibrate: {} has no cuBLAS products on this GPU (TREESPEC_WIDE_ROWS=0, no room for the f16 copies, or a calibration found they never win: TREESPEC_WIDE_ROWS=1 measures again)",
            t.name
        );
    }
    let sizes = [4usize, 8, 16, 32, 64];
    // Verify-shaped passes (every row's logits), as `--wide-verify` sends them.
    t.decoder.set_wide_verify(true);
    let quantised = bench::measure_costs(&mut t.decoder, None, prefix, &sizes, 7)?;
    t.decoder.set_wide_from(1);
    let wide = bench::measure_costs(&mut t.decoder, None, prefix, &sizes, 7)?;
    t.decoder.set_wide_verify(false);
    let ms = |rows: &[bench::CostRow], n: usize| {
        rows.iter()
            .skip(1) // the decode step
            .find(|r| r.rows == n)
            .map(|r| r.ms)
    };
    let table: Vec<(usize, f64, f64)> = sizes
        .iter()
        .filter_map(|&n| Some((n, ms(&quantised, n)?, ms(&wide, n)?)))
        .collect();
    let cal = crossover::Calibration::of(table);
    let key = crossover::key(&gpu, t.decoder.config());
    let path = crossover::path();
    crossover::record_in(&path, &key, &cal)?;
    println!(
        "{} on {gpu}, verify passes after {prefix} tokens:\n",
        t.name
    );
    println!("| rows | quantised kernels, ms | cuBLAS, ms |\n| ---: | ---: | ---: |");
    for (n, q, w) in &cal.table {
        println!("| {n} | {q:.2} | {w:.2} |");
    }
    match cal.from {
        Some(from) => println!("\ncuBLAS from {from} rows, recorded in {}", path.display()),
        None => println!(
            "\ncuBLAS lost at every size: recorded (no f16 copies from now on) in {}",
            path.display()
        ),
    }
    Ok(())
}

fn run_bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.costs {
        return run_costs(&a);
    }
    if a.products {
        return run_products(&a);
    }
    let base = a.decode.settings(Mode::Ar)?;
    let variants = a
        .modes
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| bench::Variant::parse(s, &base))
        .collect::<treespec::Result<Vec<_>>>()?;
    let needs_drafter = variants.iter().any(|v| v.settings.mode.uses_drafter());
    let sets = if a.prompts.is_empty() {
        bench::bundled_prompts(a.limit)?
    } else {
        a.prompts
            .iter()
            .map(|p| bench::load_prompts(p, a.limit))
            .collect::<treespec::Result<Vec<_>>>()?
    };
    let settings = a.decode.settings(Mode::Ar)?;
    let wants_mtp = variants
        .iter()
        .any(|v| matches!(v.settings.mode, Mode::Mtp | Mode::Auto));
    let head = match wants_mtp {
        true => load::head_for(&a.target, a.head.head.as_deref()),
        false => None,
    };
    let (mut engine, m) = build_engine(
        &a.target,
        (
            match needs_drafter {
                true => DrafterChoice::Named(&a.drafter),
                false => DrafterChoice::None,
            },
            head.as_deref(),
        ),
        settings,
        a.decode.seed,
        &a.runtime,
    )?;
    let cfg = BenchConfig {
        variants,
        max_tokens: a.max_tokens,
        seed: a.decode.seed,
    };
    let report = bench::run(
        &mut engine,
        &m.tokenizer,
        &m.template,
        &sets,
        &cfg,
        |line| eprintln!("{line}"),
    )?;
    println!("{}", bench::markdown(&report));
    if treespec::profile::enabled() {
        // Totals over every mode measured: profile one mode at a time to attribute it.
        eprint!("{}", treespec::profile::report());
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if settings.sampling.is_greedy() {
        match report.first_divergence() {
            Some((set, mode, d)) if a.runtime.exact || a.require_identical => anyhow::bail!(
                "{mode} output differs from ar on {set} prompt {} at token {}",
                d.prompt,
                d.position
            ),
            Some(_) => eprintln!("greedy: some outputs differ from ar (column `= ar`)"),
            None => eprintln!("greedy: every mode emitted exactly the ar tokens"),
        }
    }
    Ok(())
}

fn run_fetch(a: FetchArgs) -> anyhow::Result<()> {
    let list: Vec<fetch::KnownModel> = if a.all {
        fetch::KNOWN.to_vec()
    } else if a.models.is_empty() {
        vec![fetch::TARGET, fetch::DRAFTER]
    } else {
        a.models
            .iter()
            .map(|k| {
                fetch::known(k).ok_or_else(|| {
                    anyhow::anyhow!("unknown model `{k}` (known: target, drafter, smollm2)")
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    for m in list {
        let p = fetch::ensure(&m).with_context(|| format!("fetching {}", m.description))?;
        println!("{}", p.display());
        // The MTP head shipped for it, into the cache beside it.
        if let Some(h) = fetch::shipped_head(m.key) {
            match fetch::ensure_head(&h) {
                Ok(p) => println!("{}", p.display()),
                Err(e) => eprintln!("treespec: `mtp` unavailable: {e}"),
            }
        }
    }
    Ok(())
}

fn run_chat(a: ChatArgs) -> anyhow::Result<()> {
    use treespec::chat::live::LiveEngine;
    use treespec::chat::scripted::ScriptedEngine;
    use treespec::chat::{ChatEngine, EngineInfo};
    use treespec::config::{self, Config};
    use treespec::transcript::{self, Transcript};
    use treespec::tui::app::{App, AppOptions};

    let cfg = Config::load(&config::path())?;
    let pick = |flag: &Option<String>, conf: &Option<String>, default: &str| {
        flag.clone()
            .or_else(|| conf.clone())
            .unwrap_or_else(|| default.to_string())
    };
    let target = pick(&a.target, &cfg.target, "target");
    let head = load::head_for(&target, a.head.head.as_deref().or(cfg.head.as_deref()));
    // With an MTP head the chat starts in `mtp`, the fastest mode on every prompt set where the
    // default pair has its head (BENCHMARKS.md section 26); otherwise in `tree`.
    let starting = if head.is_some() { "mtp" } else { "tree" };
    let mode = parse_mode(&pick(&a.mode, &cfg.mode, starting))?;
    // What the model's files recommend, for each sampling setting the user left unset.
    let recommended = match a.demo {
        true => RecommendedSampling::default(),
        false => treespec::model::source::resolve(&load::model_path(&target)?)
            .map(|files| recommended::sampling(&files))
            .unwrap_or_default(),
    };
    let recommended = RecommendedSampling {
        temperature: recommended
            .temperature
            .filter(|_| a.temperature.or(cfg.temperature).is_none()),
        top_p: recommended
            .top_p
            .filter(|_| a.top_p.or(cfg.top_p).is_none()),
        top_k: recommended
            .top_k
            .filter(|_| a.top_k.or(cfg.top_k).is_none()),
    };
    let decode = DecodeArgs {
        budget: a.budget.or(cfg.budget).unwrap_or(DEFAULT_BUDGET),
        depth: a.depth.or(cfg.depth).unwrap_or(DEFAULT_DEPTH),
        gamma: a.gamma.or(cfg.gamma).unwrap_or(DEFAULT_GAMMA),
        mtp_k: a
            .mtp_k
            .or(cfg.mtp_k)
            .unwrap_or(treespec::engine::DEFAULT_MTP_K),
        temperature: a
            .temperature
            .or(cfg.temperature)
            .or(recommended.temperature)
            .unwrap_or(0.0),
        top_p: a.top_p.or(cfg.top_p).or(recommended.top_p).unwrap_or(1.0),
        top_k: a.top_k.or(cfg.top_k).or(recommended.top_k).unwrap_or(0),
        seed: a.seed,
        min_chain_prob: a
            .min_chain_prob
            .or(cfg.min_chain_prob)
            .unwrap_or(treespec::engine::DEFAULT_MIN_CHAIN_PROB),
        expand: a
            .expand
            .or(cfg.expand)
            .unwrap_or(treespec::engine::DEFAULT_EXPAND),
    };
    let runtime = RuntimeArgs {
        device: pick(&a.device, &cfg.device, "cpu"),
        drafter_device: a.drafter_device.clone(),
        context: a.context.or(cfg.context).unwrap_or(4096),
        exact: a.exact,
        wide_verify: a.wide_verify,
    };
    // Unnamed, the drafter is the best that fits the target without a download.
    let named = a.drafter.clone().or(cfg.drafter.clone());
    let drafter = match named.as_deref() {
        Some("none") => DrafterChoice::None,
        Some(d) => DrafterChoice::Named(d),
        None => DrafterChoice::Auto,
    };
    let settings = decode.settings(mode)?;
    let dir = transcript::default_dir();
    // A chat to resume is read before the models load, so that a wrong path fails at once.
    // What the chat says on opening: lines joined by `; `.
    let mut notices: Vec<String> = vec![];
    if !recommended.is_empty() {
        let r = recommended.describe();
        notices.push(format!("sampling as the model recommends: {r}"));
    }
    let resumed = match &a.resume {
        None => None,
        Some(file) => {
            let path = if file.is_empty() {
                transcript::latest(&dir).ok_or_else(|| {
                    anyhow::anyhow!("no saved chats in {} to resume", dir.display())
                })?
            } else {
                PathBuf::from(file)
            };
            let loaded = Transcript::load(&path)?;
            if let Some(d) = loaded.dropped {
                notices.push(format!("resumed {}; dropped {d}", path.display()));
            }
            Some(loaded.transcript)
        }
    };
    let (engine, info): (Box<dyn ChatEngine>, EngineInfo) = if a.demo {
        let e = ScriptedEngine::demo();
        let info = e.info().clone();
        (Box::new(e), info)
    } else {
        let and = match drafter {
            DrafterChoice::Named(d) => format!(" and {d}"),
            _ => String::new(),
        };
        eprintln!("loading {target}{and} ...");
        let models = (drafter, head.as_deref());
        let start = decode.settings(Mode::Ar)?;
        let (mut engine, text) = build_engine(&target, models, start, decode.seed, &runtime)?;
        notices.extend(text.notes.iter().cloned());
        // A mode the models loaded cannot run starts as `ar`, saying why (unless it was only the
        // default and loading already said why there is no drafter).
        let asked = a.mode.is_some() || cfg.mode.is_some();
        match engine.mode_unavailable(mode) {
            None => engine.set_settings(settings)?,
            Some(_) if !asked && !text.notes.is_empty() => {}
            Some(why) => {
                let why = format!("{mode} is unavailable ({why}): starting in ar");
                notices.push(why);
            }
        }
        let by_mode = match engine.head() {
            Some(_) => Mode::ALL
                .into_iter()
                .filter_map(|m| engine.drafter_for(m).map(|d| (m, d)))
                .map(|(m, d)| (m, d.name().to_string(), d.kind().to_string()))
                .collect(),
            None => vec![],
        };
        let info = EngineInfo {
            target: text.name.clone(),
            drafter: engine.drafter().map(|d| d.name().to_string()),
            drafter_kind: engine.drafter().map(|d| d.kind().to_string()),
            by_mode,
            device: device::describe(engine.target().device()),
            context: engine.target().context(),
            unavailable: vec![],
            thinks: false,
        };
        let live = LiveEngine::new(engine, text.tokenizer, text.template, info);
        let info = live.info().clone();
        (Box::new(live), info)
    };
    let transcript = match resumed {
        Some(t) => t,
        None => {
            let drafter = info.drafter_label();
            Transcript::new(&dir, &info.target, drafter.as_deref(), &info.device)
        }
    };
    let opts = AppOptions {
        max_tokens: a.max_tokens.or(cfg.max_tokens).unwrap_or(1024),
        theme: a.theme.clone().or(cfg.theme.clone()),
        user_theme_dir: Some(config::themes_dir()),
        keys: cfg.keys.clone(),
    };
    let mut app = App::new(engine, transcript, opts);
    if !notices.is_empty() {
        let n = notices.join("; ");
        app.notice = Some(treespec::tui::app::Notice {
            text: n,
            error: false,
        });
    }
    treespec::tui::run(&mut app)?;
    let saved = app.transcript.path.clone();
    drop(app);
    if saved.exists() {
        eprintln!("chat saved to {}", saved.display());
    }
    Ok(())
}

/// The text the model checks of `selftest` run through each model.
const SELFTEST_TEXT: &str = "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, int(n ** 0.5) + 1):\n        if n % i == 0:\n            return False\n    return True\n\nThe function above checks whether a number is prime by trial division up to its square root.";

fn run_selftest(a: SelftestArgs) -> anyhow::Result<()> {
    if a.head.is_some() && a.models.is_empty() {
        anyhow::bail!("--head is checked over a target: give one with -m");
    }
    let dev = device::parse_device(&a.device)?;
    for line in treespec::gpu::selftest(&dev)? {
        println!("{line}");
    }
    for spec in &a.models {
        let opts = LoadOptions {
            device: dev.clone(),
            ..LoadOptions::default()
        };
        let mut m = load::load_model(spec, &opts)?;
        let mut cpu = load::load_model(spec, &LoadOptions::default())?;
        let ids = m.tokenizer.encode(SELFTEST_TEXT, false)?;
        for line in treespec::gpu::step::check_model(&mut m.decoder, &mut cpu.decoder, &ids)? {
            println!("{}: {line}", m.name);
        }
        if let (Some(path), true) = (&a.head, Some(spec) == a.models.first()) {
            let header = treespec::model::weights::read_gguf_header(path)?;
            let (cfg, context) = (m.decoder.config().clone(), m.decoder.context());
            let mut head =
                treespec::model::mtp_gguf::load(path, header, &m.name, &cfg, &opts, context)?;
            for line in head.check_gpu_step(&mut m.decoder, &ids)? {
                println!("{}: {line}", path.display());
            }
        }
    }

    println!(
        "selftest on {}: every kernel matches its reference",
        a.device
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Chat(cli.chat)) {
        Command::Chat(a) => run_chat(a),
        Command::Generate(a) => run_generate(a),
        Command::Bench(a) => run_bench(a),
        Command::Fetch(a) => run_fetch(a),
        Command::Selftest(a) => run_selftest(a),
        Command::Synth(a) => run_synth(a),
        Command::TrainDrafter(a) => run_train(a),
        Command::ExportHead(a) => run_export(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format_chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn run_synth(a: SynthArgs) -> anyhow::Result<()> {
    let shape = treespec::synth::shape(&a.shape)?;
    if a.dflash {
        treespec::synth::write_dflash(&shape, &a.out, a.seed)?;
        println!(
            "wrote {} (a random DFlash drafter for a {} target: {} layers of hidden {}, blocks of {}; for timing only)",
            a.out.display(),
            shape.name,
            treespec::synth::DFLASH_LAYERS,
            shape.hidden,
            treespec::synth::DFLASH_BLOCK
        );
        return Ok(());
    }
    let tokenizer = a
        .tokenizer_from
        .as_deref()
        .map(treespec::synth::tokenizer_from)
        .transpose()?;
    treespec::synth::write(&shape, &a.out, a.seed, tokenizer.as_ref())?;
    let vocab = tokenizer.as_ref().map_or(shape.vocab, |t| t.vocab);
    let from = match &a.tokenizer_from {
        Some(p) => format!(" (the tokenizer of {})", p.display()),
        None => String::new(),
    };
    println!(
        "wrote {} (random {}-shaped weights: {} layers, hidden {}, vocabulary {vocab}{from}; for timing only)",
        a.out.display(),
        shape.name,
        shape.layers,
        shape.hidden,
    );
    Ok(())
}

/// `--lr-schedule`'s value.
fn parse_schedule(s: &str) -> Result<treespec::train::LrSchedule, String> {
    treespec::train::LrSchedule::parse(s).ok_or_else(|| format!("`{s}`: use cosine or constant"))
}

fn run_train(a: TrainArgs) -> anyhow::Result<()> {
    let load = a.runtime.load_options()?;
    let cfg = treespec::train::run::RunConfig {
        target: a.target,
        out: a.out,
        steps: a.steps,
        opts: treespec::train::TrainOptions {
            k: a.k,
            lr: a.lr,
            schedule: a.lr_schedule,
            batch_tokens: a.batch_tokens,
            cache_bytes: (a.cache_gib.max(0.0) * (1u64 << 30) as f64) as usize,
            ..Default::default()
        },
        data: a.data,
        extra_data: a.extra_data,
        init: a.init,
        draft_vocab: a.draft_vocab,
        self_prompts: a.self_prompts,
        self_prompt_systems: a.self_prompt_system,
        eval: a.eval,
        answer_tokens: a.answer_tokens,
        seed: a.seed,
        load,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let r = treespec::train::run::run(&cfg)?;
    println!(
        "{}: step {}, held-out loss {:.3}, agreement with the target by chain step {:?}, \
         tau {:.2} walked, {:.2} simulated",
        cfg.out.display(),
        r.step,
        r.held_out_loss,
        r.held_out_agreement,
        r.walked_tau,
        r.simulated_tau
    );
    for e in &r.eval {
        println!(
            "  {}: agreement by chain step {:?}, tau {:.2} walked, {:.2} simulated",
            e.set, e.agreement, e.walked_tau, e.simulated_tau
        );
    }
    Ok(())
}

fn run_export(a: ExportArgs) -> anyhow::Result<()> {
    use treespec::model::mtp_gguf;
    let format = mtp_gguf::parse_format(&a.format)?;
    let files = treespec::model::source::resolve(&load::model_path(&a.target)?)?;
    let cfg = treespec::model::read_config(&files)?;
    let target = mtp_gguf::HeadTarget::of(&files.display_name(), &cfg);
    let mut record = a.head.clone().into_os_string();
    record.push(".json");
    // The record beside the head, or the one a GGUF head carries.
    let source = std::fs::read_to_string(&record)
        .ok()
        .or_else(|| mtp_gguf::recorded_source(&a.head))
        .unwrap_or_else(|| format!("exported from {}", a.head.display()));
    // A draft vocabulary from the data's answers: the target's stop tokens always in it.
    let vocab = match (a.draft_vocab, &a.data) {
        (Some(n), Some(data)) => {
            let answers = treespec::train::run::trained_answers(data)?;
            let tokenizer = treespec::model::load_tokenizer(&files)?;
            let ids = treespec::model::draft_vocab::most_frequent(
                answers.iter().map(Vec::as_slice),
                n,
                cfg.vocab_size,
                tokenizer.stop_ids(),
            );
            // The whole vocabulary: no set at all.
            Some(ids.unwrap_or_default())
        }
        _ => None,
    };
    let done = mtp_gguf::export_with(&a.head, &a.out, format, &target, &source, vocab.as_deref())?;
    let vocab_note = match &vocab {
        Some(ids) if ids.is_empty() => ", drafting among the whole vocabulary".to_string(),
        Some(ids) => format!(", drafting among {} tokens", ids.len()),
        None => String::new(),
    };
    println!(
        "wrote {}: {:.1} MB, {} tensors (matrices in {}){vocab_note}, an MTP head for {target}",
        a.out.display(),
        done.bytes as f64 / 1e6,
        done.tensors,
        a.format.to_ascii_lowercase()
    );
    Ok(())
}

/// All causes on one line: "outer: inner: root".
fn format_chain(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| treespec::error::one_line(&c.to_string()))
        .collect::<Vec<_>>()
        .join(": ")
}
