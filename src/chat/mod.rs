//! The chat session between the engine and the terminal UI: display-ready events (text pieces
//! with their origin, the draft tree with token labels) and the [`ChatEngine`] trait the UI talks
//! to. The live implementation runs the real engine on its thread; the scripted one replays
//! prepared steps, so the UI can be tested without weights.

pub mod live;
pub mod reasoning;
pub mod scripted;

pub use crate::engine::thread::{Finished, Started};
use crate::engine::{Mode, Settings, StageTimes};
use crate::model::chat_template::ChatMessage;
use serde::{Deserialize, Serialize};

/// Where an emitted token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Plain decoding (`ar`): the target's own token, no draft involved.
    Plain,
    /// A drafted token the verifier accepted, at this depth of the tree (1 = child of the root).
    Drafted {
        /// Depth in the draft tree.
        depth: usize,
    },
    /// The target's own token that ends a speculative step (a bonus token or a correction).
    Target,
}

/// One emitted token as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenPiece {
    /// The text the token completes (may be empty while a multi-byte character is incomplete).
    pub text: String,
    /// Where it came from.
    pub origin: Origin,
    /// The step (1-based within the answer) that emitted it.
    pub step: usize,
    /// Part of a thinking model's reasoning (shown dimmed and folded, left out of the history).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning: bool,
}

/// A draft tree for display: node 0 is the root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeView {
    /// Token text of each node.
    pub labels: Vec<String>,
    /// Parent of each node.
    pub parents: Vec<Option<usize>>,
    /// Depth of each node.
    pub depths: Vec<usize>,
    /// Accepted nodes, root first.
    pub accepted: Vec<usize>,
    /// The target's own token after the accepted path (bonus or correction).
    pub next: String,
}

impl TreeView {
    /// Drafted nodes (the root not counted).
    pub fn drafted(&self) -> usize {
        self.labels.len().saturating_sub(1)
    }
}

/// One step, ready to show.
#[derive(Debug, Clone, PartialEq)]
pub struct StepView {
    /// 1-based step number within the answer.
    pub step: usize,
    /// The mode it ran in.
    pub mode: Mode,
    /// Emitted tokens as text.
    pub pieces: Vec<TokenPiece>,
    /// The verified tree.
    pub tree: TreeView,
    /// Time per stage.
    pub times: StageTimes,
}

impl StepView {
    /// Drafted tokens accepted.
    pub fn accepted(&self) -> usize {
        self.tree.accepted.len().saturating_sub(1)
    }
}

/// What the UI hears from the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatEvent {
    /// The prompt was read.
    Started(Started),
    /// One step.
    Step(StepView),
    /// The answer ended.
    Finished(Finished),
    /// New settings are in force.
    SettingsApplied(Settings),
    /// Something failed.
    Error(String),
}

/// What the UI shows about the loaded models.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineInfo {
    /// Target name.
    pub target: String,
    /// Drafter name, if any.
    pub drafter: Option<String>,
    /// Drafter kind ("causal LM").
    pub drafter_kind: Option<String>,
    /// The drafter (name, kind) of each mode that drafts, where the engine has more than one
    /// (an MTP head beside the drafter drafts `mtp`); modes not listed draft with `drafter`.
    pub by_mode: Vec<(Mode, String, String)>,
    /// Device description.
    pub device: String,
    /// Context size in tokens.
    pub context: usize,
    /// Modes that cannot run, with the reason.
    pub unavailable: Vec<(Mode, String)>,
    /// The target thinks: its vocabulary has the reasoning markers ([`reasoning`]).
    pub thinks: bool,
}

impl EngineInfo {
    /// The drafter `mode` drafts with and its kind (see [`EngineInfo::by_mode`]).
    pub fn drafter_of(&self, mode: Mode) -> Option<(&str, &str)> {
        match self.by_mode.iter().find(|(m, ..)| *m == mode) {
            Some((_, name, kind)) => Some((name.as_str(), kind.as_str())),
            None => self
                .drafter
                .as_deref()
                .map(|d| (d, self.drafter_kind.as_deref().unwrap_or("drafter"))),
        }
    }

    /// "name (kind)" of the drafter, as transcripts record it.
    pub fn drafter_label(&self) -> Option<String> {
        self.drafter.as_ref().map(|d| match &self.drafter_kind {
            Some(k) => format!("{d} ({k})"),
            None => d.clone(),
        })
    }

    /// Why `mode` cannot run, if it cannot.
    pub fn why_unavailable(&self, mode: Mode) -> Option<&str> {
        self.unavailable
            .iter()
            .find(|(m, _)| *m == mode)
            .map(|(_, why)| why.as_str())
    }
}

/// The engine as the chat UI sees it.
pub trait ChatEngine {
    /// The loaded models.
    fn info(&self) -> &EngineInfo;
    /// The settings in force (or last asked for).
    fn settings(&self) -> Settings;
    /// Start answering the conversation; events follow through [`ChatEngine::poll`].
    fn generate(&mut self, messages: &[ChatMessage], max_tokens: usize) -> crate::Result<()>;
    /// Stop the answer in progress (takes effect between two steps).
    fn stop(&mut self);
    /// Ask for new settings.
    fn apply(&mut self, settings: Settings);
    /// Ask a thinking model to reason before it answers, or not (`None`: as its template does
    /// by default), from the next answer on.
    fn set_thinking(&mut self, _thinking: Option<bool>) {}
    /// Events that arrived since the last call (never blocks).
    fn poll(&mut self) -> Vec<ChatEvent>;
}
