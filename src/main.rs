//! The `treespec` command line.

use anyhow::Context;
use clap::Parser;
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

#[path = "cli/args.rs"]
mod args;
#[path = "cli/bench.rs"]
mod bench_cmd;
#[path = "cli/chat.rs"]
mod chat_cmd;
#[path = "cli/tools.rs"]
mod tools;
use args::*;
use bench_cmd::run_bench;
use chat_cmd::run_chat;
use tools::{run_export, run_fetch, run_generate, run_selftest, run_synth, run_train};

/// candle's CPU matrix product asks for its thread count on every call and, unless
/// `RAYON_NUM_THREADS` is set, reads `/proc/cpuinfo` each time (`candle_core::utils::
/// get_num_threads`): thousands of file reads a second in a training step's small products.
/// Build rayon's pool first (its size as rayon would choose it), then name candle's own choice
/// in the variable, so that both keep their sizes and the product reads a variable instead.
fn settle_thread_counts() {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    // An error here means the pool exists already; either way it is not resized.
    let _ = rayon::ThreadPoolBuilder::new().build_global();
    let n = candle_core::utils::get_num_threads();
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
}

fn main() -> ExitCode {
    settle_thread_counts();
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

/// All causes on one line: "outer: inner: root".
fn format_chain(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| treespec::error::one_line(&c.to_string()))
        .collect::<Vec<_>>()
        .join(": ")
}
