//! Running slash commands (parsed with the table in [`crate::tui::commands`]).

use super::App;
use crate::engine::{Mode, Settings};
use crate::tui::commands::{self, CommandKind};
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
        let name = command.name;
        match command.kind {
            CommandKind::Mode => match Mode::parse(arg) {
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
            },
            CommandKind::Budget | CommandKind::Depth | CommandKind::Gamma | CommandKind::Expand => {
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
                        _ => format!("{name} {n}"),
                    });
                }
            }
            CommandKind::Temperature => {
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
            CommandKind::Think | CommandKind::NoThink => {
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
            CommandKind::System => {
                self.transcript.system = (!arg.is_empty()).then(|| arg.to_string());
                self.save();
                self.say(if arg.is_empty() {
                    "system prompt cleared".to_string()
                } else {
                    "system prompt set".to_string()
                });
            }
            CommandKind::Save => {
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
            CommandKind::Export => {
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
            CommandKind::Copy => {
                let Some(turn) = self.transcript.turns.last() else {
                    self.fail("no answer to copy yet");
                    return;
                };
                let answer = turn.answer();
                let text = match arg {
                    "" => Some(answer),
                    "code" => crate::tui::clipboard::last_code_block(&answer),
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
            CommandKind::Clear => self.new_chat(),
            CommandKind::Forget => {
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
            CommandKind::Theme => {
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
            CommandKind::Help => self.show_help = true,
            CommandKind::Quit => {
                if self.generating() {
                    self.engine.stop();
                }
                self.quit = true;
            }
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
