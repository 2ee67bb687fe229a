//! Plain autoregressive generation: the baseline every speculative mode is measured against.

use crate::error::{Error, Result};
use crate::model::decoder::{Batch, Decoder};
use crate::model::tokenizer::{StreamDecoder, TextTokenizer};
use crate::sampling::{Sampler, SamplingParams};
use std::time::{Duration, Instant};

/// Settings of one generation.
#[derive(Debug, Clone, Copy)]
pub struct GenerateOptions {
    /// Most new tokens to produce.
    pub max_tokens: usize,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Seed of the sampler.
    pub seed: u64,
    /// Longest block fed to the model at once while reading the prompt.
    pub prefill_chunk: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::greedy(),
            seed: 299_792_458,
            prefill_chunk: 512,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced a stop token.
    StopToken,
    /// `max_tokens` were produced.
    MaxTokens,
    /// The KV cache is full.
    ContextFull,
}

/// Timing and counts of one generation.
#[derive(Debug, Clone, Copy)]
pub struct GenerateStats {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Time to read the prompt (and pick the first token).
    pub prefill: Duration,
    /// New tokens produced (a stop token is not counted).
    pub new_tokens: usize,
    /// Forward passes after the prefill.
    pub decode_steps: usize,
    /// Time of those passes.
    pub decode: Duration,
    /// Why it ended.
    pub stop: StopReason,
}

impl GenerateStats {
    /// Decode speed: tokens per second after the prefill.
    pub fn decode_tokens_per_sec(&self) -> f64 {
        let s = self.decode.as_secs_f64();
        if s > 0.0 {
            self.decode_steps as f64 / s
        } else {
            0.0
        }
    }

    /// The one-line summary `generate` prints.
    pub fn summary(&self) -> String {
        format!(
            "prompt {} tokens, prefill {:.1} ms ({:.1} tok/s), decode {} tokens at {:.2} tok/s",
            self.prompt_tokens,
            self.prefill.as_secs_f64() * 1e3,
            self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9),
            self.new_tokens,
            self.decode_tokens_per_sec()
        )
    }
}

/// Feed `tokens` to the model from its current length in chunks; returns the last row's logits.
pub fn prefill(model: &mut Decoder, tokens: &[u32], chunk: usize) -> Result<Vec<f32>> {
    if tokens.is_empty() {
        return Err(Error::InvalidArgument("empty prompt".into()));
    }
    if model.len() + tokens.len() >= model.context() {
        return Err(Error::ContextOverflow {
            prompt: model.len() + tokens.len(),
            context: model.context(),
        });
    }
    let mut last = vec![];
    for piece in tokens.chunks(chunk.max(1)) {
        let out = model.forward(&Batch::causal(piece, model.len()))?;
        last = out.logits_rows()?.pop().unwrap_or_default();
    }
    Ok(last)
}

/// Generate from a prompt, calling `on_text` with each piece of decoded text as it is produced.
/// Returns the new token ids (without the stop token) and the statistics.
pub fn generate(
    model: &mut Decoder,
    tokenizer: &TextTokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_text: impl FnMut(&str),
) -> Result<(Vec<u32>, GenerateStats)> {
    model.reset();
    let mut sampler = Sampler::new(opts.sampling, opts.seed);
    let t0 = Instant::now();
    let logits = prefill(model, prompt, opts.prefill_chunk)?;
    let mut next = sampler
        .sample(&logits)
        .ok_or_else(|| Error::InvalidArgument("the model produced no logits".into()))?;
    let prefill_time = t0.elapsed();
    let mut out = Vec::new();
    let mut stream = StreamDecoder::new();
    let t1 = Instant::now();
    let mut steps = 0;
    let stop = loop {
        if tokenizer.is_stop(next) {
            break StopReason::StopToken;
        }
        out.push(next);
        if let Some(piece) = stream.push(tokenizer, next)? {
            on_text(&piece);
        }
        if out.len() >= opts.max_tokens {
            break StopReason::MaxTokens;
        }
        if model.len() + 1 >= model.context() {
            break StopReason::ContextFull;
        }
        let pos = model.len();
        let fwd = model.forward(&Batch::causal(&[next], pos))?;
        steps += 1;
        let row = fwd.logits_rows()?.pop().unwrap_or_default();
        next = sampler
            .sample(&row)
            .ok_or_else(|| Error::InvalidArgument("the model produced no logits".into()))?;
    };
    if let Some(piece) = stream.flush(tokenizer)? {
        on_text(&piece);
    }
    let stats = GenerateStats {
        prompt_tokens: prompt.len(),
        prefill: prefill_time,
        new_tokens: out.len(),
        decode_steps: steps,
        decode: t1.elapsed(),
        stop,
    };
    Ok((out, stats))
}
