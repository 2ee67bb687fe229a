//! Changing the decoding settings from keys and commands: every change goes through
//! [`Settings::validate`], the engine's one check.

use super::App;
use crate::engine::{Mode, Settings, BUDGET_STEPS};

/// The message of a [`Settings::validate`] error, for a notice (without the `config:` that
/// the command line puts in front).
fn setting_message(e: crate::Error) -> String {
    match e {
        crate::Error::Config(msg) => msg,
        other => other.to_string(),
    }
}

impl App {
    /// Ask the engine for new settings, if [`Settings::validate`] accepts them and the mode can
    /// run; otherwise show why as an error and change nothing. True when applied.
    pub(super) fn apply(&mut self, s: Settings) -> bool {
        if let Err(e) = s.validate() {
            self.fail(setting_message(e));
            return false;
        }
        if let Some(why) = self.engine.info().why_unavailable(s.mode) {
            let why = why.to_string();
            self.fail(format!("{} is unavailable: {why}", s.mode));
            return false;
        }
        self.settings = s;
        self.engine.apply(s);
        true
    }

    /// A key's step to `s`: applied (with `done` as the notice) when within the limits; at a
    /// limit, the notice says so and nothing changes.
    fn step_to(&mut self, s: Settings, done: String) {
        match s.validate() {
            Ok(()) => {
                if self.apply(s) {
                    self.say(done);
                }
            }
            Err(e) => self.say(setting_message(e)),
        }
    }

    /// Switch to the next available mode.
    pub fn cycle_mode(&mut self) {
        let modes = Mode::ALL;
        let start = modes
            .iter()
            .position(|m| *m == self.settings.mode)
            .unwrap_or(0);
        for i in 1..=modes.len() {
            let m = modes[(start + i) % modes.len()];
            if self.engine.info().why_unavailable(m).is_none() {
                let s = Settings {
                    mode: m,
                    ..self.settings
                };
                if m != self.settings.mode && self.apply(s) {
                    self.say(format!("mode {m}"));
                }
                return;
            }
        }
    }

    pub(super) fn step_budget(&mut self, up: bool) {
        let mut s = self.settings;
        match s.mode {
            Mode::Tree | Mode::Auto => {
                // The next step of BUDGET_STEPS above (or below) the budget in force.
                let next = if up {
                    BUDGET_STEPS.iter().find(|&&b| b > s.budget)
                } else {
                    BUDGET_STEPS.iter().rev().find(|&&b| b < s.budget)
                };
                s.budget = match next {
                    Some(&b) => b,
                    None => {
                        let at = if up { "largest" } else { "smallest" };
                        self.say(format!("budget {} is the {at} step", s.budget));
                        return;
                    }
                };
                self.step_to(s, format!("budget {}", s.budget));
            }
            Mode::Linear | Mode::Mtp => {
                let n = s.chain_mut();
                *n = if up { *n + 1 } else { n.saturating_sub(1) };
                let length = *n;
                let shown = format!("{} {length}", s.chain_name());
                self.step_to(s, shown);
            }
            Mode::Ar => self.say("the budget applies in tree, linear, mtp and auto modes"),
        }
    }

    pub(super) fn step_depth(&mut self, up: bool) {
        let mut s = self.settings;
        s.depth = if up {
            s.depth + 1
        } else {
            s.depth.saturating_sub(1)
        };
        self.step_to(s, format!("depth {}", s.depth));
    }

    pub(super) fn step_temperature(&mut self, delta: f32) {
        let mut s = self.settings;
        s.sampling.temperature = ((s.sampling.temperature + delta) * 10.0).round() / 10.0;
        let done = format!("temperature {:.1}", s.sampling.temperature);
        self.step_to(s, done);
    }
}
