//! Keys and pasted text: editing the message, Tab completion, and the bound actions.

use super::App;
use crate::tui::commands::{self, Completion};
use crate::tui::keymap::Action;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

impl App {
    /// Handle one key press.
    pub fn on_key(&mut self, ev: KeyEvent) {
        if ev.kind == KeyEventKind::Release {
            return;
        }
        self.selection = None;
        let is_ctrl_c =
            ev.code == KeyCode::Char('c') && ev.modifiers.contains(KeyModifiers::CONTROL);
        if !is_ctrl_c {
            self.quit_armed = false;
        }
        if self.show_help {
            // Any key closes the help; Ctrl+C still stops or quits.
            self.show_help = false;
            if !is_ctrl_c {
                return;
            }
        }
        match self.keymap.action(&ev) {
            Some(a) => self.act(a, is_ctrl_c),
            None => self.edit(ev),
        }
    }

    /// Handle pasted text.
    pub fn on_paste(&mut self, text: &str) {
        self.input.insert_str(text);
    }

    fn edit(&mut self, ev: KeyEvent) {
        let ctrl = ev.modifiers.contains(KeyModifiers::CONTROL);
        let alt = ev.modifiers.contains(KeyModifiers::ALT);
        match ev.code {
            KeyCode::Char('?') if self.input.is_empty() && !ctrl && !alt => self.show_help = true,
            KeyCode::Char('w') if ctrl => self.input.delete_word(),
            KeyCode::Char('u') if ctrl => {
                self.input.take();
            }
            KeyCode::Char(c) if !ctrl && !alt => self.input.insert(c),
            KeyCode::Tab => self.tab(),
            KeyCode::Backspace => self.input.backspace(),
            KeyCode::Delete => self.input.delete(),
            KeyCode::Left => self.input.left(),
            KeyCode::Right => self.input.right(),
            KeyCode::Home => self.input.home(),
            KeyCode::End => self.input.end(),
            KeyCode::Up if !self.input.up() => {
                let current = self.input.text().to_string();
                if let Some(h) = self.history.older(&current).map(str::to_string) {
                    self.input.set(&h);
                }
            }
            KeyCode::Down if !self.input.down() => {
                if let Some(h) = self.history.newer().map(str::to_string) {
                    self.input.set(&h);
                }
            }
            _ => {}
        }
    }

    /// Tab: complete a slash command's name being typed, else indent.
    fn tab(&mut self) {
        let completion = if self.input.at_end() {
            commands::complete(self.input.text())
        } else {
            None
        };
        match completion {
            None => self.input.insert_str("    "),
            Some(Completion::Unique(full)) => self.input.set(&full),
            Some(Completion::Several { common, names }) => {
                if common.len() > self.input.text().len() {
                    self.input.set(&common);
                }
                self.say(names.join(" "));
            }
            Some(Completion::NoMatch) => {
                let text = self.input.text().to_string();
                self.fail(format!("no command starts with {text} (/help lists them)"));
            }
        }
    }

    fn act(&mut self, a: Action, is_ctrl_c: bool) {
        match a {
            Action::Send => self.send(),
            Action::Newline => self.input.insert('\n'),
            Action::Stop => {
                if self.generating() {
                    self.engine.stop();
                    self.stop_requested = true;
                    self.say("stopping after this step");
                } else if is_ctrl_c {
                    if self.quit_armed {
                        self.quit = true;
                    } else {
                        self.quit_armed = true;
                        self.say("press Ctrl+C again to quit");
                    }
                } else {
                    self.notice = None;
                }
            }
            Action::Quit => {
                if self.generating() {
                    self.engine.stop();
                }
                self.quit = true;
            }
            Action::CycleMode => self.cycle_mode(),
            Action::BudgetUp => self.step_budget(true),
            Action::BudgetDown => self.step_budget(false),
            Action::DepthUp => self.step_depth(true),
            Action::DepthDown => self.step_depth(false),
            Action::TempUp => self.step_temperature(0.1),
            Action::TempDown => self.step_temperature(-0.1),
            Action::Regenerate => self.regenerate(),
            Action::NewChat => self.new_chat(),
            Action::ToggleTree => self.show_tree = !self.show_tree,
            Action::ToggleColour => {
                self.colour = !self.colour;
                self.say(if self.colour {
                    "token colouring on"
                } else {
                    "token colouring off"
                });
            }
            Action::ToggleReasoning => {
                self.show_reasoning = !self.show_reasoning;
                self.say(match self.show_reasoning {
                    true => "reasoning unfolded",
                    false => "reasoning folded",
                });
            }
            Action::CycleTheme => {
                self.theme = (self.theme + 1) % self.themes.len();
                let name = self.theme().name.clone();
                self.say(format!("theme {name}"));
            }
            Action::Help => self.show_help = true,
            Action::PageUp => self.scroll += self.page.max(1),
            Action::PageDown => self.scroll = self.scroll.saturating_sub(self.page.max(1)),
            Action::ScrollUp => self.scroll += 1,
            Action::ScrollDown => self.scroll = self.scroll.saturating_sub(1),
            Action::ScrollBottom => self.scroll = 0,
        }
    }
}
