//! The chat application's state and behaviour: keys, slash commands and engine events change it;
//! [`super::view`] draws it. Nothing here touches the terminal, so whole-app tests drive it with
//! fake key events and a scripted engine.
//!
//! This file holds the state and the conversation (send, regenerate, new chat); `keys` handles
//! key presses, `mouse` the wheel and selections, `settings` the decoding settings, `slash` the
//! slash commands, and `engine_events` what the engine reports.

mod engine_events;
mod keys;
mod mouse;
mod settings;
mod slash;

pub use mouse::{ChatView, Selection};

use super::input::{History, InputBox};
use super::keymap::Keymap;
use super::theme::Theme;
use crate::chat::{ChatEngine, Origin, StepView};
use crate::engine::{AnswerStats, Settings};
use crate::model::chat_template::{ChatMessage, Role};
use crate::transcript::{Transcript, Turn};
use std::path::PathBuf;
use std::time::Instant;

/// What the user can do when the conversation no longer fits the model's context.
pub const CONTEXT_FULL_CHOICE: &str =
    "/forget leaves the oldest turn out of the model's context, Ctrl+N starts a new chat";

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
    /// Show a thinking model's reasoning in full (else one folded line per answer).
    pub show_reasoning: bool,
    /// Text for the clipboard, which the terminal loop sends (OSC 52) and clears.
    pub clipboard: Option<String>,
    /// The oldest turns left out of the model's context (`/forget`); the screen still shows them.
    pub forgotten: usize,
    /// Show the help popup.
    pub show_help: bool,
    /// Lines scrolled up from the bottom (0: follow new output).
    pub scroll: usize,
    /// The conversation as last drawn (what a mouse selection reads).
    pub chat_view: ChatView,
    /// Text selected with the mouse in the conversation.
    pub selection: Option<Selection>,
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
    /// Esc was pressed during the answer in progress (it ends after its current step).
    stop_requested: bool,
    started: Option<Instant>,
    /// When the answer in progress was asked for (its time to first token counts from here).
    asked: Option<Instant>,
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
            show_reasoning: false,
            forgotten: 0,
            clipboard: None,
            show_help: false,
            scroll: 0,
            chat_view: ChatView::default(),
            selection: None,
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
            stop_requested: false,
            started: None,
            asked: None,
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
        self.forgotten = self.forgotten.min(self.transcript.turns.len());
        let mut messages = self.transcript.messages_after(self.forgotten);
        messages.push(ChatMessage::new(Role::User, text.clone()));
        match self.engine.generate(&messages, self.max_tokens) {
            Ok(()) => {
                self.current = Some(Turn::new(text));
                self.stop_requested = false;
                self.stats = AnswerStats::default();
                self.started = Some(Instant::now());
                self.asked = self.started;
                self.scroll = 0;
                self.notice = None;
            }
            Err(e) => {
                self.input.set(&text);
                let full = matches!(e, crate::Error::ContextOverflow { .. });
                self.fail(match full {
                    true => format!("{e}: {}", CONTEXT_FULL_CHOICE),
                    false => e.to_string(),
                });
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
        self.forgotten = 0;
        self.say("new chat");
    }

    fn save(&mut self) {
        if let Err(e) = self.transcript.save() {
            self.fail(format!("could not save the transcript: {e}"));
        }
    }

    /// All turns to draw: the saved ones and the one in progress.
    pub fn turns(&self) -> impl Iterator<Item = &Turn> {
        self.transcript.turns.iter().chain(self.current.iter())
    }

    /// Leave the `n` oldest turns still in the model's context out of it (they stay on screen
    /// and in the transcript); returns how many were left out.
    pub fn forget(&mut self, n: usize) -> usize {
        let before = self.forgotten;
        self.forgotten = (self.forgotten + n).min(self.transcript.turns.len());
        self.forgotten - before
    }

    /// Tokens of the context in use after the last answer (its prompt and what it generated).
    pub fn context_used(&self) -> usize {
        self.stats.prompt_tokens + self.stats.tokens
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
