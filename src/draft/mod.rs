//! Drafters: models that propose tokens for the target to verify.
//!
//! [`CausalDrafter`] is a small causal LM sharing the target's tokenizer: it drafts a chain one
//! token per forward pass and keeps, at each depth, the distribution it drew from (DDTree builds
//! its tree from those per-depth distributions).

pub mod causal;

pub use causal::{CausalDrafter, Chain, ChainStep};

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
