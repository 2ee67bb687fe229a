//! The library's error type: one enum, one clear line per failure a user can cause.

use std::path::PathBuf;

/// Everything that can go wrong in the treespec library.
///
/// Each variant's message is written for the person at the terminal: it names the file, the model
/// or the number that is wrong, and where it helps, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory that does not exist.
    #[error("not found: {0}")]
    NotFound(PathBuf),
    /// A file that exists but cannot be read or written (permission denied, a directory where a
    /// file should be, a failing disk, ...).
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A GGUF file that cannot be parsed or is cut short.
    #[error("{path}: not a usable GGUF file: {reason}")]
    BadGguf {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A safetensors checkpoint (or its config) that cannot be used.
    #[error("{path}: not a usable checkpoint: {reason}")]
    BadCheckpoint {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A model family the decoder does not implement.
    #[error(
        "unsupported architecture `{0}` (treespec runs llama, qwen2 and qwen3 dense decoders)"
    )]
    UnsupportedArchitecture(String),
    /// A tensor the architecture needs is absent from the weights.
    #[error("missing tensor `{0}` in the model weights")]
    MissingTensor(String),
    /// A tensor of the wrong shape.
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    TensorShape {
        /// Tensor name.
        name: String,
        /// The shape found.
        got: Vec<usize>,
        /// The shape the config implies.
        expected: Vec<usize>,
    },
    /// Model hub errors: unreachable, not cached while offline, no such file.
    #[error("model hub: {0}")]
    Hub(String),
    /// A downloaded or cached file whose sha256 is not the pinned one.
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}")]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// The pinned digest.
        expected: String,
        /// The digest of the bytes on disk.
        actual: String,
    },
    /// Fetching a packaged model failed.
    #[error("fetch: {0}")]
    Fetch(String),
    /// The prompt (plus at least one new token) does not fit the context.
    #[error("the prompt has {prompt} tokens but the context holds {context}; shorten it or raise --context")]
    ContextOverflow {
        /// Prompt length in tokens.
        prompt: usize,
        /// Context capacity in tokens.
        context: usize,
    },
    /// Tokenizer construction or use failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to parse or render.
    #[error("chat template: {0}")]
    Template(String),
    /// A config value that is missing or out of range.
    #[error("config: {0}")]
    Config(String),
    /// A device string or a device that cannot be opened.
    #[error("device: {0}")]
    Device(String),
    /// A caller passed arguments that do not fit together (row out of range, mask size, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An error from the tensor library.
    #[error("{}", candle_message(.0))]
    Candle(#[from] candle_core::Error),
    /// An I/O error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// An I/O error on `path`: [`Error::NotFound`] when it does not exist, else [`Error::File`]
    /// with what the operating system said.
    pub fn io(path: &std::path::Path, e: std::io::Error) -> Error {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound(path.to_path_buf())
        } else {
            Error::File {
                path: path.to_path_buf(),
                source: e,
            }
        }
    }
}

/// The library's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// A candle error's message on one line, without the backtrace candle attaches.
pub fn candle_message(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_message(inner),
        other => one_line(&other.to_string()),
    }
}

/// Collapse a message onto one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
