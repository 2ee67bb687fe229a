//! Taking in what the engine reports: steps stream into the answer in progress, which is
//! committed to the transcript (and saved) when it finishes.

use super::App;
use crate::chat::{ChatEvent, Finished};
use crate::engine::{Mode, StopReason};
use crate::transcript::StepRecord;
use std::time::Instant;

impl App {
    /// Take in whatever the engine reported.
    pub fn poll_engine(&mut self) -> bool {
        let events = self.engine.poll();
        let any = !events.is_empty();
        for e in events {
            self.on_engine(e);
        }
        if let (Some(t0), true) = (self.started, self.generating()) {
            self.stats.decode = t0.elapsed();
        }
        any
    }

    /// Take in one engine event.
    pub fn on_engine(&mut self, e: ChatEvent) {
        match e {
            ChatEvent::Started(s) => {
                self.stats.prompt_tokens = s.prompt_tokens;
                self.stats.cached_tokens = s.cached_tokens;
                self.stats.prefill = s.prefill;
                // Decode speed counts from the end of the prompt.
                self.started = Some(Instant::now());
            }
            ChatEvent::Step(v) => {
                if let (Some(t), true) = (self.asked, self.stats.tokens == 0) {
                    self.stats.first_token = t.elapsed();
                }
                self.stats.tokens += v.pieces.len();
                self.stats.steps += 1;
                if v.mode != Mode::Ar {
                    self.stats.offered += v.tree.depths.iter().copied().max().unwrap_or(0);
                    self.stats.accepted += v.accepted();
                }
                if let Some(t) = &mut self.current {
                    t.tokens.extend(v.pieces.iter().cloned());
                    t.steps.push(StepRecord::from_view(&v));
                }
                self.last_step = Some(v);
            }
            ChatEvent::Finished(Finished {
                reason,
                tokens,
                steps,
                decode,
            }) => {
                self.stats.decode = decode;
                self.stats.steps = steps;
                self.stats.tokens = tokens;
                self.started = None;
                self.stop_requested = false;
                if let Some(mut t) = self.current.take() {
                    if t.tokens.is_empty() && reason == StopReason::Cancelled {
                        // Nothing was said: give the message back rather than save an empty turn.
                        if self.input.is_empty() {
                            self.input.set(&t.user);
                        }
                        return;
                    }
                    t.stop = Some(reason);
                    t.stats = self.stats;
                    self.transcript.turns.push(t);
                    self.save();
                    if reason == StopReason::ContextFull {
                        let choice = super::CONTEXT_FULL_CHOICE;
                        self.fail(format!("the context is full: {choice}"));
                    } else if reason == StopReason::MaxTokens {
                        self.say("answer cut at the token limit");
                    }
                }
            }
            ChatEvent::SettingsApplied(s) => self.settings = s,
            ChatEvent::Error(e) => {
                self.settings = self.engine.settings();
                self.fail(e);
            }
        }
    }
}
