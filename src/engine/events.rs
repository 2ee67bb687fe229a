//! What the engine reports: one [`StepEvent`] per target pass, with its stage timings, and the
//! [`Outcome`] of a whole answer.

use super::stats::AnswerStats;
use crate::settings::Mode;
use crate::tree::DraftTree;
use std::time::Duration;

/// Time spent in each stage of one step (or of many, added up): the one form of stage timings in
/// events, transcripts and `bench`. Written as `[draft, build, verify, walk, commit]` in
/// milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimes {
    /// Drafting (drafter forward passes).
    pub draft: Duration,
    /// Building the tree from the drafter's distributions.
    pub build: Duration,
    /// The target's verification forward pass.
    pub verify: Duration,
    /// Logits of visited nodes, the target's choices and the walk.
    pub walk: Duration,
    /// Cache compaction in the target and the drafter.
    pub commit: Duration,
}

impl StageTimes {
    /// Sum of the stages.
    pub fn total(&self) -> Duration {
        self.draft + self.build + self.verify + self.walk + self.commit
    }

    /// Add another step's times.
    pub fn add(&mut self, o: &StageTimes) {
        self.draft += o.draft;
        self.build += o.build;
        self.verify += o.verify;
        self.walk += o.walk;
        self.commit += o.commit;
    }

    /// The stages in milliseconds: draft, build, verify, walk, commit.
    pub fn millis(&self) -> [f64; 5] {
        [self.draft, self.build, self.verify, self.walk, self.commit].map(|d| d.as_secs_f64() * 1e3)
    }

    /// Each stage's share of the total.
    pub fn shares(&self) -> [f64; 5] {
        let ms = self.millis();
        let total: f64 = ms.iter().sum();
        ms.map(|m| if total > 0.0 { m / total } else { 0.0 })
    }
}

impl serde::Serialize for StageTimes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.millis().serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for StageTimes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let ms = <[f64; 5]>::deserialize(d)?;
        let t = |m: f64| Duration::from_secs_f64((m / 1e3).max(0.0));
        Ok(StageTimes {
            draft: t(ms[0]),
            build: t(ms[1]),
            verify: t(ms[2]),
            walk: t(ms[3]),
            commit: t(ms[4]),
        })
    }
}

/// Why an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced a stop token.
    StopToken,
    /// The token limit was reached.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The user stopped it.
    Cancelled,
}

/// What one step did: the draft, what the target accepted, what was emitted, and the timings.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEvent {
    /// The mode this step ran in.
    pub mode: Mode,
    /// The verified tree: node 0 is the root; a chain for `linear`, the root alone for `ar`.
    pub tree: DraftTree,
    /// Accepted node indices, starting with the root (0).
    pub accepted: Vec<usize>,
    /// Tokens emitted by this step: the accepted drafted tokens, then the target's own token
    /// (bonus or correction), cut at a stop token or the token limit.
    pub emitted: Vec<u32>,
    /// The target's own token after the accepted path (before any cut).
    pub next: u32,
    /// Drafted tokens of this step that the drafter had drafted before the step began: while
    /// the target verified the previous step (see [`crate::draft::Drafter::draft_ahead`]), or as
    /// the part of the previous step's chain its tree left out.
    pub drafted_ahead: usize,
    /// Time per stage.
    pub times: StageTimes,
    /// Set when the answer ended with this step.
    pub finished: Option<StopReason>,
    /// The step paid a one-off cost: a pass whose shape was new to the GPU's CUDA graphs, or (in
    /// `auto`) a drafter catching up on tokens other arms committed.
    pub cold: bool,
}

impl StepEvent {
    /// Drafted tokens accepted (the root not counted).
    pub fn accepted_drafts(&self) -> usize {
        self.accepted.len().saturating_sub(1)
    }

    /// Depth in the tree of each emitted token that came from the draft (`Some(depth)`), or
    /// `None` for the target's own token.
    pub fn origins(&self) -> Vec<Option<usize>> {
        (0..self.emitted.len())
            .map(|i| self.accepted.get(i + 1).map(|&node| self.tree.depths[node]))
            .collect()
    }
}

/// What [`crate::engine::Engine::begin`] did with a prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prefill {
    /// Time to read the rows that were not cached.
    pub time: Duration,
    /// Leading prompt tokens whose rows the caches kept from the previous answer (not read
    /// again): the conversation so far, up to where the new prompt differs from it.
    pub cached: usize,
}

/// The result of [`crate::engine::Engine::generate`].
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The answer's tokens (without the stop token).
    pub tokens: Vec<u32>,
    /// Time to read the prompt.
    pub prefill: Duration,
    /// Counts and decode time (the time of all steps).
    pub stats: AnswerStats,
    /// Why it ended.
    pub stop: StopReason,
}
