//! One prompt, one streamed answer: the engine driven to the end with text decoded as it comes.

use crate::engine::{AnswerStats, Engine, StopReason};
use crate::error::Result;
use crate::model::tokenizer::{StreamDecoder, TextTokenizer};
use std::time::Duration;

/// Timing and counts of one generation.
#[derive(Debug, Clone, Copy)]
pub struct GenerateStats {
    /// The answer's counts and decode time.
    pub answer: AnswerStats,
    /// Time to read the prompt.
    pub prefill: Duration,
    /// Why it ended.
    pub stop: StopReason,
}

impl GenerateStats {
    /// The one-line summary `generate` prints.
    pub fn summary(&self) -> String {
        let a = &self.answer;
        format!(
            "prompt {} tokens, prefill {:.1} ms ({:.1} tok/s), decode {} tokens at {:.2} tok/s, \
             {:.2} tokens per target pass",
            a.prompt_tokens,
            self.prefill.as_secs_f64() * 1e3,
            a.read_tokens() as f64 / self.prefill.as_secs_f64().max(1e-9),
            a.tokens,
            a.tokens_per_sec(),
            a.tau()
        )
    }
}

/// Answer `prompt` with the engine's current settings, calling `on_text` with each piece of text
/// as soon as it is complete.
pub fn generate(
    engine: &mut Engine,
    tokenizer: &TextTokenizer,
    prompt: &[u32],
    max_tokens: usize,
    mut on_text: impl FnMut(&str),
) -> Result<(Vec<u32>, GenerateStats)> {
    let mut stream = StreamDecoder::new();
    let mut err = None;
    let outcome = engine.generate(prompt, max_tokens, |ev| {
        for &t in &ev.emitted {
            match stream.push(tokenizer, t) {
                Ok(Some(piece)) => on_text(&piece),
                Ok(None) => {}
                Err(e) => {
                    err = Some(e);
                    return false;
                }
            }
        }
        true
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    if let Some(piece) = stream.flush(tokenizer)? {
        on_text(&piece);
    }
    let stats = GenerateStats {
        answer: outcome.stats,
        prefill: outcome.prefill,
        stop: outcome.stop,
    };
    Ok((outcome.tokens, stats))
}
