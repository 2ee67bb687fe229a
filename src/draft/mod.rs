//! Drafters: models that propose tokens for the target to verify.
//!
//! [`CausalDrafter`] is a small causal LM sharing the target's tokenizer: it drafts a chain one
//! token per forward pass and keeps, at each depth, the distribution it drew from (DDTree builds
//! its tree from those per-depth distributions), or grows a tree itself, expanding the most
//! probable nodes of each depth ([`expand`]).

pub mod causal;
pub mod dflash;
pub mod expand;

pub use causal::{CausalDrafter, Chain, ChainStep};
pub use dflash::{DFlashConfig, DFlashDrafter};
pub use expand::GrownTree;

/// The drafter an engine runs with.
pub enum Drafter {
    /// A small causal LM: one forward pass per drafted depth.
    Causal(CausalDrafter),
    /// A DFlash block-diffusion drafter: one pass for the whole block.
    DFlash(DFlashDrafter),
}

impl Drafter {
    /// Display name.
    pub fn name(&self) -> &str {
        match self {
            Drafter::Causal(d) => d.name(),
            Drafter::DFlash(d) => d.name(),
        }
    }

    /// What kind of drafter it is, for display: "causal LM" or "DFlash".
    pub fn kind(&self) -> &'static str {
        match self {
            Drafter::Causal(_) => "causal LM",
            Drafter::DFlash(_) => "DFlash",
        }
    }

    /// Forget everything from position `len` on.
    pub fn truncate(&mut self, len: usize) {
        match self {
            Drafter::Causal(d) => d.truncate(len.min(d.len())),
            Drafter::DFlash(d) => d.truncate(len),
        }
    }

    /// Positions the drafter's state covers.
    pub fn len(&self) -> usize {
        match self {
            Drafter::Causal(d) => d.len(),
            Drafter::DFlash(d) => d.context_len(),
        }
    }

    /// True when it covers nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<CausalDrafter> for Drafter {
    fn from(d: CausalDrafter) -> Self {
        Drafter::Causal(d)
    }
}

impl From<DFlashDrafter> for Drafter {
    fn from(d: DFlashDrafter) -> Self {
        Drafter::DFlash(d)
    }
}

use crate::error::{Error, Result};
use crate::model::tokenizer::TextTokenizer;

/// Refuse a drafter whose vocabulary is not the target's, naming the first difference.
pub fn check_same_vocabulary(
    target_name: &str,
    target: &TextTokenizer,
    drafter_name: &str,
    drafter: &TextTokenizer,
) -> Result<()> {
    let (a, b) = (target.vocab(), drafter.vocab());
    if a == b {
        return Ok(());
    }
    let first = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let at = |v: &[String]| {
        v.get(first)
            .map_or("(none)".to_string(), |t| format!("{t:?}"))
    };
    Err(Error::Config(format!(
        "the drafter {drafter_name} does not share the target {target_name}'s vocabulary \
         ({} vs {} tokens; first difference at id {first}: {} vs {}); speculative decoding needs \
         a drafter with the target's tokenizer",
        b.len(),
        a.len(),
        at(b),
        at(a)
    )))
}
