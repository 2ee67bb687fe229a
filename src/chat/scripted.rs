//! A scripted chat engine: replays prepared answers step by step, with no model. The UI tests
//! run on it, and `treespec chat --demo` shows the interface without weights.

use super::{
    ChatEngine, ChatEvent, EngineInfo, Finished, Origin, Started, StepView, TokenPiece, TreeView,
};
use crate::engine::{Mode, Settings, StageTimes, StopReason};
use crate::model::chat_template::ChatMessage;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer: the steps it streams.
#[derive(Debug, Clone, Default)]
pub struct ScriptedAnswer {
    /// The steps, in order.
    pub steps: Vec<StepView>,
}

impl ScriptedAnswer {
    /// An answer made of steps given as `(accepted drafted pieces, the target's own piece)`,
    /// each drafted piece at depth 1, 2, ... in a chain tree with one rejected sibling.
    pub fn from_steps(mode: Mode, steps: &[(&[&str], &str)]) -> Self {
        let steps = steps
            .iter()
            .enumerate()
            .map(|(i, (drafted, own))| {
                let step = i + 1;
                let mut pieces: Vec<TokenPiece> = drafted
                    .iter()
                    .enumerate()
                    .map(|(d, t)| TokenPiece {
                        text: t.to_string(),
                        origin: Origin::Drafted { depth: d + 1 },
                        step,
                        reasoning: false,
                    })
                    .collect();
                pieces.push(TokenPiece {
                    text: own.to_string(),
                    origin: if mode == Mode::Ar {
                        Origin::Plain
                    } else {
                        Origin::Target
                    },
                    step,
                    reasoning: false,
                });
                let mut tree = TreeView {
                    labels: vec!["<root>".into()],
                    parents: vec![None],
                    depths: vec![0],
                    accepted: vec![0],
                    next: own.to_string(),
                };
                if mode != Mode::Ar {
                    for (d, t) in drafted.iter().enumerate() {
                        tree.labels.push(t.to_string());
                        tree.parents
                            .push(Some(if d == 0 { 0 } else { tree.labels.len() - 2 }));
                        tree.depths.push(d + 1);
                        tree.accepted.push(tree.labels.len() - 1);
                    }
                    // A rejected alternative under the last accepted node.
                    let last = *tree.accepted.last().unwrap_or(&0);
                    tree.labels.push(format!("{own}?"));
                    tree.parents.push(Some(last));
                    tree.depths.push(tree.depths[last] + 1);
                }
                StepView {
                    step,
                    mode,
                    pieces,
                    tree,
                    times: StageTimes {
                        draft: Duration::from_millis(3),
                        build: Duration::from_micros(50),
                        verify: Duration::from_millis(9),
                        walk: Duration::from_millis(1),
                        commit: Duration::from_micros(100),
                    },
                }
            })
            .collect();
        ScriptedAnswer { steps }
    }

    /// The same answer with its first `steps` steps a thinking model's reasoning.
    pub fn reasoning_first(mut self, steps: usize) -> Self {
        for s in self.steps.iter_mut().take(steps) {
            for p in &mut s.pieces {
                p.reasoning = true;
            }
        }
        self
    }
}

/// What a scripted engine was asked to do (shared, so tests can read it after handing the
/// engine to the app).
#[derive(Debug, Clone, Default)]
pub struct ScriptLog {
    /// Every conversation it was asked to answer.
    pub requests: Vec<Vec<ChatMessage>>,
    /// Settings it was asked to apply, in order.
    pub applied: Vec<Settings>,
    /// How many times it was asked to stop.
    pub stops: usize,
    /// Each `set_thinking` call, in order.
    pub thinking: Vec<Option<bool>>,
}

/// A chat engine that replays scripted answers, one step per poll.
pub struct ScriptedEngine {
    info: EngineInfo,
    settings: Settings,
    answers: VecDeque<ScriptedAnswer>,
    pending: VecDeque<ChatEvent>,
    /// Tokens and steps of the answer in progress handed out so far (what a stop reports).
    delivered: (usize, usize),
    log: Arc<Mutex<ScriptLog>>,
}

impl ScriptedEngine {
    /// An engine that answers with `answers` in turn (and with a short default answer after).
    pub fn new(answers: Vec<ScriptedAnswer>) -> Self {
        ScriptedEngine {
            info: EngineInfo {
                target: "scripted-target".into(),
                drafter: Some("scripted-drafter".into()),
                drafter_kind: Some("causal LM".into()),
                by_mode: vec![],
                device: "cpu".into(),
                context: 4096,
                unavailable: vec![(
                    Mode::Mtp,
                    "the target has no multi-token-prediction head".into(),
                )],
                thinks: false,
            },
            settings: Settings::default(),
            answers: answers.into(),
            pending: VecDeque::new(),
            delivered: (0, 0),
            log: Arc::new(Mutex::new(ScriptLog::default())),
        }
    }

    /// The same engine with the target's own MTP head as its drafter (so `mtp` is available).
    pub fn with_mtp_head(mut self) -> Self {
        self.info.drafter = Some("scripted-target MTP head".into());
        self.info.drafter_kind = Some(crate::draft::mtp::KIND.into());
        self.info.unavailable.clear();
        self
    }

    /// The same engine with an MTP head beside its causal drafter (so `mtp` is available and
    /// drafts with the head).
    pub fn with_head_beside(mut self) -> Self {
        let head = ("scripted-head.gguf".into(), crate::draft::mtp::KIND.into());
        self.info.by_mode = vec![(Mode::Mtp, head.0, head.1)];
        self.info.unavailable.clear();
        self
    }

    /// The same engine over a thinking target (its answers may carry reasoning).
    pub fn thinking(mut self) -> Self {
        self.info.thinks = true;
        self
    }

    /// The shared log of what it was asked.
    pub fn log(&self) -> Arc<Mutex<ScriptLog>> {
        Arc::clone(&self.log)
    }

    fn record(&self, f: impl FnOnce(&mut ScriptLog)) {
        if let Ok(mut l) = self.log.lock() {
            f(&mut l);
        }
    }

    /// A demonstration script.
    pub fn demo() -> Self {
        let a = ScriptedAnswer::from_steps(
            Mode::Tree,
            &[
                (&["Tree", " speculation", " drafts"], " a"),
                (&[" tree", " of"], " continuations"),
                (&[",", " and", " the", " target"], " checks"),
                (&[" every", " branch", " in"], " one"),
                (&[" pass", "."], "\n"),
            ],
        );
        Self::new(vec![a])
    }

    /// Events still queued.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

impl ChatEngine for ScriptedEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn settings(&self) -> Settings {
        self.settings
    }

    fn generate(&mut self, messages: &[ChatMessage], max_tokens: usize) -> crate::Result<()> {
        // As a model's caches would: the messages the last request began with are not read again
        // (one token a byte here).
        let cached = self
            .log
            .lock()
            .ok()
            .and_then(|l| l.requests.last().cloned())
            .map_or(0, |last| {
                last.iter()
                    .zip(messages)
                    .take_while(|(a, b)| a == b)
                    .map(|(m, _)| m.content.len())
                    .sum()
            });
        let prompt_tokens: usize = messages.iter().map(|m| m.content.len()).sum();
        // (The last prompt token is read by the first step, never cached.)
        let cached = cached.min(prompt_tokens.saturating_sub(1));
        self.record(|l| l.requests.push(messages.to_vec()));
        self.delivered = (0, 0);
        let answer = self
            .answers
            .pop_front()
            .unwrap_or_else(|| ScriptedAnswer::from_steps(self.settings.mode, &[(&["OK"], ".")]));
        self.pending.push_back(ChatEvent::Started(Started {
            prompt_tokens,
            cached_tokens: cached,
            prefill: Duration::from_millis(5),
        }));
        let mut tokens = 0;
        let mut steps = 0;
        let mut reason = StopReason::StopToken;
        for s in answer.steps {
            if tokens + s.pieces.len() > max_tokens {
                reason = StopReason::MaxTokens;
                break;
            }
            tokens += s.pieces.len();
            steps += 1;
            self.pending.push_back(ChatEvent::Step(s));
        }
        self.pending.push_back(ChatEvent::Finished(Finished {
            reason,
            tokens,
            steps,
            decode: Duration::from_millis(10 * steps as u64),
        }));
        Ok(())
    }

    fn stop(&mut self) {
        self.record(|l| l.stops += 1);
        if self.pending.is_empty() {
            return;
        }
        // The answer ends after the steps already handed out, and says how many there were.
        self.pending
            .retain(|e| !matches!(e, ChatEvent::Step(_) | ChatEvent::Finished(_)));
        let (tokens, steps) = self.delivered;
        self.pending.push_back(ChatEvent::Finished(Finished {
            reason: StopReason::Cancelled,
            tokens,
            steps,
            decode: Duration::from_millis(10 * steps as u64),
        }));
    }

    fn apply(&mut self, settings: Settings) {
        self.record(|l| l.applied.push(settings));
        if let Some(why) = self.info.why_unavailable(settings.mode) {
            self.pending.push_back(ChatEvent::Error(format!(
                "mode {} is unavailable: {why}",
                settings.mode
            )));
            return;
        }
        self.settings = settings;
        self.pending.push_back(ChatEvent::SettingsApplied(settings));
    }

    fn set_thinking(&mut self, thinking: Option<bool>) {
        self.record(|l| l.thinking.push(thinking));
    }

    fn poll(&mut self) -> Vec<ChatEvent> {
        // One step per poll, so that the UI sees a stream.
        let mut out = vec![];
        while let Some(e) = self.pending.pop_front() {
            let is_step = if let ChatEvent::Step(s) = &e {
                self.delivered.0 += s.pieces.len();
                self.delivered.1 += 1;
                true
            } else {
                false
            };
            out.push(e);
            if is_step {
                break;
            }
        }
        out
    }
}
