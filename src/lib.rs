//! treespec: a terminal chat for local LLMs whose decoding core is speculative decoding with
//! tree-walk verification (DDTree). This crate holds the engine-side library: the model runtime,
//! sampling, plain generation and model fetching. The binary (`src/main.rs`) is a thin CLI over it.

pub mod device;
pub mod error;
pub mod fetch;
pub mod generate;
pub mod model;
pub mod paths;
pub mod sampling;
pub mod tree;

pub use error::{Error, Result};
