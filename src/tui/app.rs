//! The chat application's state and behaviour: keys, slash commands and engine events change it;
//! [`super::view`] draws it. Nothing here touches the terminal, so whole-app tests drive it with
//! fake key events and a scripted engine.

use super::commands::{self, CommandKind, Completion};
use super::input::{History, InputBox};
use super::keymap::{Action, Keymap};
use super::theme::Theme;
use crate::chat::{ChatEngine, ChatEvent, Finished, Origin, StepView};
use crate::engine::{AnswerStats, Mode, Settings, StopReason, BUDGET_STEPS};
use crate::model::chat_template::{ChatMessage, Role};
use crate::transcript::{StepRecord, Transcript, Turn};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::path::PathBuf;
use std::time::Instant;

/// The message of a [`Settings::validate`] error, for a notice (without the `config:` that
/// the command line puts in front).
fn setting_message(e: crate::Error) -> String {
    match e {
        crate::Error::Config(msg) => msg,
        other => other.to_string(),
    }
}

/// A message under the input box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// What to say.
    pub text: String,
    /// Shown as an error.
    pub error: bool,
}

/// Settings of the app that do not belong to the engine.
#[derive(Debug, Clone)]
pub struct AppOptions {
    /// Token limit per answer.
    pub max_tokens: usize,
    /// Theme to start with (by name).
    pub theme: Option<String>,
    /// Where user themes live.
    pub user_theme_dir: Option<PathBuf>,
    /// Key overrides from the config file.
    pub keys: std::collections::BTreeMap<String, Vec<String>>,
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            max_tokens: 1024,
            theme: None,
            user_theme_dir: None,
            keys: Default::default(),
        }
    }
}

/// The chat application.
pub struct App {
    /// The engine behind it.
    pub engine: Box<dyn ChatEngine>,
    /// The saved conversation.
    pub transcript: Transcript,
    /// The answer being generated.
    pub current: Option<Turn>,
    /// The message being typed.
    pub input: InputBox,
    /// Sent messages.
    pub history: History,
    /// Key bindings.
    pub keymap: Keymap,
    /// Available themes.
    pub themes: Vec<Theme>,
    /// Index of the theme in use.
    pub theme: usize,
    /// Show the draft tree panel.
    pub show_tree: bool,
    /// Colour tokens by origin.
    pub colour: bool,
    /// Show the help popup.
    pub show_help: bool,
    /// Lines scrolled up from the bottom (0: follow new output).
    pub scroll: usize,
    /// Height of the transcript view at the last draw (for page scrolling).
    pub page: usize,
    /// The last step, drawn in the tree panel.
    pub last_step: Option<StepView>,
    /// Statistics of the answer in progress or the last one.
    pub stats: AnswerStats,
    /// The settings shown (and last asked of the engine).
    pub settings: Settings,
    /// A message under the input.
    pub notice: Option<Notice>,
    /// Set when the app should end.
    pub quit: bool,
    quit_armed: bool,
    started: Option<Instant>,
    max_tokens: usize,
}

impl App {
    /// A new app over an engine, saving to `transcript`.
    pub fn new(engine: Box<dyn ChatEngine>, transcript: Transcript, opts: AppOptions) -> Self {
        let (themes, theme_problems) = Theme::load_all(opts.user_theme_dir.as_deref());
        let (keymap, key_problems) = Keymap::with_overrides(&opts.keys);
        let theme = opts
            .theme
            .as_deref()
            .and_then(|n| themes.iter().position(|t| t.name == n))
            .unwrap_or(0);
        let mut problems: Vec<String> = theme_problems;
        problems.extend(key_problems);
        if let Some(n) = &opts.theme {
            if !themes.iter().any(|t| &t.name == n) {
                problems.push(format!("no theme named `{n}`"));
            }
        }
        let settings = engine.settings();
        App {
            engine,
            transcript,
            current: None,
            input: InputBox::default(),
            history: History::default(),
            keymap,
            themes,
            theme,
            show_tree: true,
            colour: true,
            show_help: false,
            scroll: 0,
            page: 10,
            last_step: None,
            stats: AnswerStats::default(),
            settings,
            notice: (!problems.is_empty()).then(|| Notice {
                text: problems.join("; "),
                error: true,
            }),
            quit: false,
            quit_armed: false,
            started: None,
            max_tokens: opts.max_tokens,
        }
    }

    /// The theme in use.
    pub fn theme(&self) -> &Theme {
        &self.themes[self.theme.min(self.themes.len() - 1)]
    }

    /// True while an answer is being generated.
    pub fn generating(&self) -> bool {
        self.current.is_some()
    }

    fn say(&mut self, text: impl Into<String>) {
        self.notice = Some(Notice {
            text: text.into(),
            error: false,
        });
    }

    fn fail(&mut self, text: impl Into<String>) {
        self.notice = Some(Notice {
            text: text.into(),
            error: true,
        });
    }

    /// Handle one key press.
    pub fn on_key(&mut self, ev: KeyEvent) {
        if ev.kind == KeyEventKind::Release {
            return;
        }
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

    /// Ask the engine for new settings, if [`Settings::validate`] accepts them and the mode can
    /// run; otherwise show why as an error and change nothing. True when applied.
    fn apply(&mut self, s: Settings) -> bool {
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

    fn step_budget(&mut self, up: bool) {
        let mut s = self.settings;
        match s.mode {
            Mode::Tree => {
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
            Mode::Linear => {
                s.gamma = if up {
                    s.gamma + 1
                } else {
                    s.gamma.saturating_sub(1)
                };
                self.step_to(s, format!("gamma {}", s.gamma));
            }
            Mode::Ar | Mode::Mtp => self.say("the budget applies in tree and linear modes"),
        }
    }

    fn step_depth(&mut self, up: bool) {
        let mut s = self.settings;
        s.depth = if up {
            s.depth + 1
        } else {
            s.depth.saturating_sub(1)
        };
        self.step_to(s, format!("depth {}", s.depth));
    }

    fn step_temperature(&mut self, delta: f32) {
        let mut s = self.settings;
        s.sampling.temperature = ((s.sampling.temperature + delta) * 10.0).round() / 10.0;
        let done = format!("temperature {:.1}", s.sampling.temperature);
        self.step_to(s, done);
    }

    /// Send the message in the input box (or run it as a slash command).
    pub fn send(&mut self) {
        let text = self.input.text().to_string();
        if text.trim().is_empty() {
            return;
        }
        if text.trim_start().starts_with('/') {
            self.input.take();
            self.history.push(&text);
            self.slash(text.trim());
            return;
        }
        if self.generating() {
            self.fail("an answer is being generated; press Esc to stop it");
            return;
        }
        self.input.take();
        self.history.push(&text);
        self.ask(text);
    }

    fn ask(&mut self, text: String) {
        let mut messages = self.transcript.messages();
        messages.push(ChatMessage::new(Role::User, text.clone()));
        match self.engine.generate(&messages, self.max_tokens) {
            Ok(()) => {
                self.current = Some(Turn::new(text));
                self.stats = AnswerStats::default();
                self.started = Some(Instant::now());
                self.scroll = 0;
                self.notice = None;
            }
            Err(e) => {
                self.input.set(&text);
                self.fail(e.to_string());
            }
        }
    }

    /// Answer the last message again.
    pub fn regenerate(&mut self) {
        if self.generating() {
            self.fail("an answer is being generated; press Esc to stop it first");
            return;
        }
        match self.transcript.turns.pop() {
            Some(t) => self.ask(t.user),
            None => self.say("nothing to regenerate"),
        }
    }

    /// Start a new chat (the old one stays saved).
    pub fn new_chat(&mut self) {
        if self.generating() {
            self.engine.stop();
            self.current = None;
        }
        let dir = self
            .transcript
            .path
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(crate::transcript::default_dir);
        let info = self.engine.info().clone();
        let system = self.transcript.system.clone();
        self.transcript =
            Transcript::new(&dir, &info.target, info.drafter.as_deref(), &info.device);
        self.transcript.system = system;
        self.last_step = None;
        self.stats = AnswerStats::default();
        self.scroll = 0;
        self.say("new chat");
    }

    fn save(&mut self) {
        if let Err(e) = self.transcript.save() {
            self.fail(format!("could not save the transcript: {e}"));
        }
    }

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
                    CommandKind::Gamma => s.gamma = n,
                    _ => s.expand = n,
                }
                if self.apply(s) {
                    self.say(match command.kind {
                        CommandKind::Expand if n == 0 => "tree from the drafter's chain".into(),
                        CommandKind::Expand => {
                            format!("the drafter grows the tree, {n} nodes per depth")
                        }
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
                match self
                    .transcript
                    .export_markdown(path.map(std::path::Path::new))
                {
                    Ok(p) => self.say(format!("exported to {}", p.display())),
                    Err(e) => self.fail(format!("could not export: {e}")),
                }
            }
            CommandKind::Clear => self.new_chat(),
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
                // Decode speed counts from the end of the prompt.
                self.started = Some(Instant::now());
            }
            ChatEvent::Step(v) => {
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
                        self.fail("the context is full: start a new chat (Ctrl+N) to go on");
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

    /// All turns to draw: the saved ones and the one in progress.
    pub fn turns(&self) -> impl Iterator<Item = &Turn> {
        self.transcript.turns.iter().chain(self.current.iter())
    }

    /// Count tokens of each origin in the conversation (plain, drafted, target).
    pub fn origin_counts(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for t in self.turns() {
            for p in &t.tokens {
                match p.origin {
                    Origin::Plain => c.0 += 1,
                    Origin::Drafted { .. } => c.1 += 1,
                    Origin::Target => c.2 += 1,
                }
            }
        }
        c
    }
}
