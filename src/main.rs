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

/// All causes on one line: "outer: inner: root".
fn format_chain(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| treespec::error::one_line(&c.to_string()))
        .collect::<Vec<_>>()
        .join(": ")
}
