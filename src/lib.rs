//! treespec: a terminal chat for local LLMs whose decoding core is speculative decoding with
//! tree-walk verification (DDTree). This crate holds the engine side: the model runtime, drafters,
//! the DDTree builder and walk, lossless verification, the decode engine, benchmarking and model
//! fetching. The binary (`src/main.rs`) is a thin CLI over it.

pub mod arch;
pub mod bench;
pub mod chat;
pub mod config;
pub mod device;
pub mod draft;
pub mod engine;
pub mod error;
pub mod fetch;
pub mod generate;
pub mod gpu;
pub mod load;
pub mod model;
pub mod paths;
pub mod profile;
pub mod quant;
pub mod sampling;
pub mod settings;
pub mod synth;
pub mod train;
pub mod transcript;
pub mod tree;
pub mod tui;
pub mod verify;

pub use error::{Error, Result};
