//! Running slash commands (parsed with the table in [`crate::tui::commands`]).

use super::App;
use crate::engine::{Mode, Settings};
use crate::tui::commands::{self, Command, CommandKind};
use std::path::{Path, PathBuf};

impl App {
    /// Run a slash command.
    pub fn slash(&mut self, cmd: &str) {
        let (command, arg) = match commands::parse(cmd) {
            Ok(c) => c,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        match command.kind {
            CommandKind::Mode => self.slash_mode(command, arg),
            CommandKind::Budget | CommandKind::Depth | CommandKind::Gamma | CommandKind::Expand => {
                self.slash_number(command, arg)
            }
            CommandKind::Temperature => self.slash_temperature(command, arg),
            CommandKind::Think | CommandKind::NoThink => self.slash_thinking(command),
            CommandKind::System => self.slash_system(arg),
            CommandKind::Save => self.slash_save(arg),
            CommandKind::Export => self.slash_export(command, arg),
            CommandKind::Copy => self.slash_copy(command, arg),
            CommandKind::Clear => self.new_chat(),
            CommandKind::Forget => self.slash_forget(command, arg),
            CommandKind::Theme => self.slash_theme(arg),
            CommandKind::Help => self.show_help = true,
            CommandKind::Quit => {
                if self.generating() {
                    self.engine.stop();
                }
                self.quit = true;
            }
        }
    }

    /// `/mode ar|linear|tree|mtp`: decode in that mode.
    fn slash_mode(&mut self, command: &Command, arg: &str) {
        match Mode::parse(arg) {
            Some(m) => {
                let s = Settings {
                    mode: m,
                    ..self.settings
                };
                if self.apply(s) {
                    self.say(format!("mode {m}"));
                }
            }
            None => self.fail(format!("usage: {}", command.usage())),
        }
    }

    /// `/budget N`, `/depth N`, `/gamma N` (in `mtp`, the head's k) and `/expand W`: set that
    /// number of the settings.
    fn slash_number(&mut self, command: &Command, arg: &str) {
        let Ok(n) = arg.parse::<usize>() else {
            self.fail(format!("usage: {} (a whole number)", command.usage()));
            return;
        };
        let mut s = self.settings;
        match command.kind {
            CommandKind::Budget => s.budget = n,
            CommandKind::Depth => s.depth = n,
            // In `mtp` the chain is the head's: /gamma sets its k.
            CommandKind::Gamma => *s.chain_mut() = n,
            _ => s.expand = n,
        }
        if self.apply(s) {
            self.say(match command.kind {
                CommandKind::Expand if n == 0 => "tree from the drafter's chain".into(),
                CommandKind::Expand => {
                    format!("the drafter grows the tree, {n} nodes per depth")
                }
                CommandKind::Gamma => format!("{} {n}", self.settings.chain_name()),
                _ => format!("{} {n}", command.name),
            });
        }
    }

    /// `/temp T`: sample at that temperature (0: greedy).
    fn slash_temperature(&mut self, command: &Command, arg: &str) {
        let Ok(t) = arg.parse::<f32>() else {
            self.fail(format!("usage: {} (0 is greedy)", command.usage()));
            return;
        };
        let mut s = self.settings;
        s.sampling.temperature = t;
        if self.apply(s) {
            self.say(format!("temperature {t}"));
        }
    }

    /// `/think` and `/no_think`: turn a thinking model's reasoning on or off from the next
    /// answer on.
    fn slash_thinking(&mut self, command: &Command) {
        if !self.engine.info().thinks {
            self.fail("this model does not think: it has no <think> tokens");
            return;
        }
        let on = command.kind == CommandKind::Think;
        self.engine.set_thinking(Some(on));
        self.say(match on {
            true => "thinking on: the model reasons before it answers (next answer)",
            false => "thinking off: the model answers at once (next answer)",
        });
    }

    /// `/system TEXT`: set the system prompt (no text: clear it), and save the chat.
    fn slash_system(&mut self, arg: &str) {
        self.transcript.system = (!arg.is_empty()).then(|| arg.to_string());
        self.save();
        self.say(if arg.is_empty() {
            "system prompt cleared".to_string()
        } else {
            "system prompt set".to_string()
        });
    }

    /// `/save [PATH]`: save the chat (to `PATH` from now on, where given).
    fn slash_save(&mut self, arg: &str) {
        if !arg.is_empty() {
            self.transcript.path = PathBuf::from(arg);
        }
        match self.transcript.save() {
            Ok(()) => {
                let p = self.transcript.path.display().to_string();
                self.say(format!("saved to {p}"));
            }
            Err(e) => self.fail(format!("could not save: {e}")),
        }
    }

    /// `/export md [PATH]`: write the chat as Markdown ([`App::markdown`]).
    fn slash_export(&mut self, command: &Command, arg: &str) {
        let mut a = arg.splitn(2, char::is_whitespace);
        let fmt = a.next().unwrap_or("");
        let path = a.next().map(str::trim).filter(|p| !p.is_empty());
        if fmt != "md" && fmt != "markdown" {
            self.fail(format!("usage: {}", command.usage()));
            return;
        }
        match self.export_markdown(path.map(Path::new)) {
            Ok(p) => self.say(format!("exported to {}", p.display())),
            Err(e) => self.fail(format!("could not export: {e}")),
        }
    }

    /// `/copy [code]`: copy the last answer (or its last code block) to the clipboard.
    fn slash_copy(&mut self, command: &Command, arg: &str) {
        let Some(turn) = self.transcript.turns.last() else {
            self.fail("no answer to copy yet");
            return;
        };
        let answer = turn.answer();
        let text = match arg {
            "" => Some(answer),
            "code" => crate::tui::markdown::code_blocks(&answer).pop(),
            _ => {
                self.fail(format!("usage: {}", command.usage()));
                return;
            }
        };
        match text {
            Some(t) => {
                let what = if arg.is_empty() {
                    "the last answer"
                } else {
                    "its last code block"
                };
                self.say(format!("copied {what} ({} characters)", t.chars().count()));
                self.clipboard = Some(t);
            }
            None => self.fail("the last answer has no code block"),
        }
    }

    /// `/forget [N]`: leave N more turns (default 1) out of the model's context.
    fn slash_forget(&mut self, command: &Command, arg: &str) {
        let n = match arg {
            "" => Ok(1),
            a => a.parse::<usize>(),
        };
        let Ok(n) = n else {
            self.fail(format!("usage: {} (a whole number)", command.usage()));
            return;
        };
        let left_out = self.forget(n);
        let kept = self.transcript.turns.len() - self.forgotten;
        self.say(match left_out {
            0 => "no turns left to leave out of the context".to_string(),
            n => format!("{n} more turns left out of the model's context ({kept} in it)"),
        });
    }

    /// `/theme [NAME]`: switch to that theme, or (no name) list them.
    fn slash_theme(&mut self, arg: &str) {
        if arg.is_empty() {
            let names: Vec<String> = self.themes.iter().map(|t| t.name.clone()).collect();
            self.say(format!("themes: {}", names.join(", ")));
        } else if let Some(i) = self.themes.iter().position(|t| t.name == arg) {
            self.theme = i;
            self.say(format!("theme {arg}"));
        } else {
            self.fail(format!("no theme named `{arg}`"));
        }
    }

    /// The conversation as Markdown, as the screen shows it: with the answer in progress (its
    /// tokens so far and its counts), marked as such. An answer stopped with Esc stays in
    /// progress until the engine reports that it finished (after its current step, which on a
    /// slow CPU can take seconds); it is exported as it stands, marked as stopped.
    pub fn markdown(&self) -> String {
        let Some(current) = &self.current else {
            return self.transcript.to_markdown();
        };
        let mut shown = self.transcript.clone();
        let mut turn = current.clone();
        turn.stats = self.stats;
        shown.turns.push(turn);
        let mut md = shown.to_markdown();
        md.push_str(if self.stop_requested {
            "_(stopped: the answer above was still ending when this was exported)_\n\n"
        } else {
            "_(in progress: the answer above was still being generated when this was exported)_\n\n"
        });
        md
    }

    /// Write [`App::markdown`] beside the transcript (or to `path`); returns where.
    fn export_markdown(&self, path: Option<&Path>) -> crate::Result<PathBuf> {
        let out = path
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.transcript.path.with_extension("md"));
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
        }
        std::fs::write(&out, self.markdown()).map_err(|e| crate::Error::io(&out, e))?;
        Ok(out)
    }
}
