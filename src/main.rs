//! The `treespec` command line.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;
use treespec::generate::{generate, GenerateOptions};
use treespec::model::chat_template::{ChatMessage, Role};
use treespec::model::{self, LoadOptions};
use treespec::sampling::SamplingParams;
use treespec::{device, fetch};

#[derive(Parser)]
#[command(
    name = "treespec",
    version,
    about = "Local LLM chat with tree-walk speculative decoding"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate an answer to one prompt with plain autoregressive decoding, streaming to stdout.
    Generate(GenerateArgs),
    /// Fetch known models into the cache (default: the target and drafter pair).
    Fetch(FetchArgs),
}

#[derive(Args)]
struct ModelArgs {
    /// A GGUF file, a checkpoint directory, a hub id (org/name or org/name:file), or a known
    /// model: target, drafter, smollm2 (fetched if missing).
    #[arg(long, short = 'm', default_value = "target")]
    model: String,
    /// Where to run: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// KV cache capacity in tokens.
    #[arg(long, default_value_t = 4096)]
    context: usize,
    /// Dequantise every weight to f32 (slow; for exact comparisons).
    #[arg(long)]
    exact: bool,
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
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
}

#[derive(Args)]
struct FetchArgs {
    /// Known models to fetch: target, drafter, smollm2 (default: target drafter).
    models: Vec<String>,
    /// Fetch every known model.
    #[arg(long)]
    all: bool,
}

/// Resolve a model argument, fetching known models by key.
fn model_path(spec: &str) -> anyhow::Result<String> {
    if let Some(known) = fetch::known(spec) {
        let p = fetch::ensure(&known).with_context(|| format!("fetching {}", known.description))?;
        return Ok(p.display().to_string());
    }
    Ok(spec.to_string())
}

fn run_generate(a: GenerateArgs) -> anyhow::Result<()> {
    if !(a.temperature >= 0.0 && a.temperature.is_finite()) {
        anyhow::bail!("--temperature must be a finite number >= 0");
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        anyhow::bail!("--top-p must be in (0, 1]");
    }
    let dev = device::parse_device(&a.model.device)?;
    let path = model_path(&a.model.model)?;
    let opts = LoadOptions {
        device: dev,
        exact: a.model.exact,
        context: a.model.context,
        ..LoadOptions::default()
    };
    let mut m = model::load(&path, &opts)?;
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
    let ids = m.tokenizer.encode(&text, true)?;
    let gen = GenerateOptions {
        max_tokens: a.max_tokens,
        sampling: SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
        },
        seed: a.seed,
        ..GenerateOptions::default()
    };
    let mut stdout = std::io::stdout().lock();
    let (_, stats) = generate(&mut m.decoder, &m.tokenizer, &ids, &gen, |piece| {
        let _ = stdout.write_all(piece.as_bytes());
        let _ = stdout.flush();
    })?;
    let _ = writeln!(stdout);
    drop(stdout);
    eprintln!("[{}] {}", m.name, stats.summary());
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
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(a) => run_generate(a),
        Command::Fetch(a) => run_fetch(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// All causes on one line: "outer: inner: root".
fn format_chain(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| treespec::error::one_line(&c.to_string()))
        .collect::<Vec<_>>()
        .join(": ")
}
