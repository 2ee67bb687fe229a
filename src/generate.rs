//! One prompt, one streamed answer: the engine driven to the end with text decoded as it comes.

use crate::engine::{Engine, Outcome, StopReason};
use crate::error::Result;
use crate::model::tokenizer::{StreamDecoder, TextTokenizer};
use std::time::Duration;

/// Timing and counts of one generation.
#[derive(Debug, Clone, Copy)]
pub struct GenerateStats {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Time to read the prompt.
    pub prefill: Duration,
    /// New tokens produced (a stop token is not counted).
    pub new_tokens: usize,
    /// Target forward passes after the prompt.
    pub steps: usize,
    /// Time of those passes.
    pub decode: Duration,
    /// Why it ended.
    pub stop: StopReason,
}

impl GenerateStats {
    fn from_outcome(prompt_tokens: usize, o: &Outcome) -> Self {
        GenerateStats {
            prompt_tokens,
            prefill: o.prefill,
            new_tokens: o.tokens.len(),
            steps: o.steps,
            decode: o.decode,
            stop: o.stop,
        }
    }

    /// Decode speed: new tokens per second after the prompt.
    pub fn decode_tokens_per_sec(&self) -> f64 {
        let s = self.decode.as_secs_f64();
        if s > 0.0 {
            self.new_tokens as f64 / s
        } else {
            0.0
        }
    }

    /// Mean tokens per target forward pass.
    pub fn tau(&self) -> f64 {
        self.new_tokens as f64 / self.steps.max(1) as f64
    }

    /// The one-line summary `generate` prints.
    pub fn summary(&self) -> String {
        format!(
            "prompt {} tokens, prefill {:.1} ms ({:.1} tok/s), decode {} tokens at {:.2} tok/s, \
             {:.2} tokens per target pass",
            self.prompt_tokens,
            self.prefill.as_secs_f64() * 1e3,
            self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9),
            self.new_tokens,
            self.decode_tokens_per_sec(),
            self.tau()
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
    let stats = GenerateStats::from_outcome(prompt.len(), &outcome);
    Ok((outcome.tokens, stats))
}
