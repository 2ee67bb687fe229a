//! The counts of an answer and the one definition of the rates shown everywhere (status bar,
//! transcripts, `generate`'s summary line, `bench`): tokens per second, tokens per target pass
//! (tau) and the acceptance of drafted tokens.

use super::events::StepEvent;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Counts and decode time of one answer (or of many, added up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerStats {
    /// Prompt tokens read before the answer.
    #[serde(default)]
    pub prompt_tokens: usize,
    /// Of those, the leading ones whose cached rows were kept from the previous answer: not
    /// read again, so not counted in the prompt's speed.
    #[serde(default)]
    pub cached_tokens: usize,
    /// Tokens emitted (a stop token is not counted).
    pub tokens: usize,
    /// Target passes.
    pub steps: usize,
    /// Drafted depth offered, summed over the steps that drafted.
    #[serde(default)]
    pub offered: usize,
    /// Drafted tokens accepted, summed.
    #[serde(default)]
    pub accepted: usize,
    /// Drafted tokens that were drafted before their step began, summed (see
    /// [`StepEvent::drafted_ahead`]).
    #[serde(default)]
    pub ahead: usize,
    /// Time of the decode steps (the prompt not included).
    #[serde(rename = "decode_ms", with = "millis")]
    pub decode: Duration,
    /// Time to read the prompt (0 where not measured).
    #[serde(default, rename = "prefill_ms", with = "millis")]
    pub prefill: Duration,
    /// Time from sending the message to its first answer token, as the user waits for it (0
    /// where not measured).
    #[serde(default, rename = "first_token_ms", with = "millis")]
    pub first_token: Duration,
}

impl AnswerStats {
    /// Count one step (its tokens, and what it drafted and accepted).
    pub fn add_step(&mut self, ev: &StepEvent) {
        self.tokens += ev.emitted.len();
        self.steps += 1;
        self.offered += ev.tree.max_depth();
        self.accepted += ev.accepted_drafts();
        self.ahead += ev.drafted_ahead;
    }

    /// Add another answer's counts.
    pub fn add(&mut self, o: &AnswerStats) {
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.tokens += o.tokens;
        self.steps += o.steps;
        self.offered += o.offered;
        self.accepted += o.accepted;
        self.ahead += o.ahead;
        self.decode += o.decode;
        self.prefill += o.prefill;
        self.first_token += o.first_token;
    }

    /// Prompt tokens read per second, the cached ones left out (0 where the prompt's time was
    /// not measured).
    pub fn prompt_tokens_per_sec(&self) -> f64 {
        per_sec(self.read_tokens(), self.prefill)
    }

    /// Prompt tokens read before the first step: neither kept from the cache nor the last one,
    /// which the first step reads.
    pub fn read_tokens(&self) -> usize {
        self.prompt_tokens.saturating_sub(self.cached_tokens + 1)
    }

    /// Tokens per second of decoding (0 before any time has passed).
    pub fn tokens_per_sec(&self) -> f64 {
        per_sec(self.tokens, self.decode)
    }

    /// Tokens per target pass.
    pub fn tau(&self) -> f64 {
        self.tokens as f64 / self.steps.max(1) as f64
    }

    /// Accepted drafted tokens over drafted depth offered (`None` when nothing was drafted).
    pub fn acceptance(&self) -> Option<f64> {
        (self.offered > 0).then(|| self.accepted as f64 / self.offered as f64)
    }

    /// Share of the drafted depth that was drafted before its step began (`None` before
    /// anything was drafted).
    pub fn ahead_share(&self) -> Option<f64> {
        (self.offered > 0).then(|| self.ahead as f64 / self.offered as f64)
    }
}

/// `count` over `time` in seconds (0 where no time has passed).
fn per_sec(count: usize, time: Duration) -> f64 {
    match time.as_secs_f64() {
        s if s > 0.0 => count as f64 / s,
        _ => 0.0,
    }
}

/// A duration stored as milliseconds (f64), as transcripts have always written it.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Ok(Duration::from_secs_f64((ms / 1e3).max(0.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let s = AnswerStats {
            tokens: 30,
            steps: 10,
            offered: 40,
            accepted: 20,
            decode: Duration::from_millis(1500),
            ..Default::default()
        };
        assert_eq!(s.tokens_per_sec(), 20.0);
        assert_eq!(s.tau(), 3.0);
        assert_eq!(s.acceptance(), Some(0.5));
        assert_eq!(s.ahead_share(), Some(0.0));
        assert_eq!(AnswerStats { ahead: 10, ..s }.ahead_share(), Some(0.25));
        assert_eq!(AnswerStats::default().tokens_per_sec(), 0.0);
        assert_eq!(AnswerStats::default().acceptance(), None);
    }

    #[test]
    fn old_transcripts_still_read() {
        let s: AnswerStats =
            serde_json::from_str(r#"{"tokens":5,"steps":2,"decode_ms":250.0,"prompt_tokens":9}"#)
                .unwrap();
        assert_eq!((s.tokens, s.steps, s.prompt_tokens), (5, 2, 9));
        assert_eq!(s.decode, Duration::from_millis(250));
        let back: AnswerStats = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
