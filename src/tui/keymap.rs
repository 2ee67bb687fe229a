//! Key bindings: actions, their default keys, overrides from the config file, and the help
//! listing built from the real map.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::collections::BTreeMap;

/// Something a key can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Send the message (or run the slash command).
    Send,
    /// Insert a newline in the message.
    Newline,
    /// Stop the answer in progress (or close the help).
    Stop,
    /// Quit (Ctrl+C quits when pressed twice while idle).
    Quit,
    /// Next decoding mode.
    CycleMode,
    /// Larger tree budget (longer chain in `linear`).
    BudgetUp,
    /// Smaller tree budget.
    BudgetDown,
    /// Deeper tree.
    DepthUp,
    /// Shallower tree.
    DepthDown,
    /// Higher temperature.
    TempUp,
    /// Lower temperature.
    TempDown,
    /// Answer the last message again.
    Regenerate,
    /// Start a new chat.
    NewChat,
    /// Show or hide the draft tree.
    ToggleTree,
    /// Colour tokens by origin, or not.
    ToggleColour,
    /// Unfold or fold a thinking model's reasoning.
    ToggleReasoning,
    /// Next theme.
    CycleTheme,
    /// Show the help.
    Help,
    /// Scroll the transcript up a page.
    PageUp,
    /// Scroll the transcript down a page.
    PageDown,
    /// Scroll up a line.
    ScrollUp,
    /// Scroll down a line.
    ScrollDown,
    /// Follow the newest output again.
    ScrollBottom,
}

impl Action {
    /// Every action, in help order.
    pub const ALL: [Action; 23] = [
        Action::Send,
        Action::Newline,
        Action::Stop,
        Action::Quit,
        Action::CycleMode,
        Action::BudgetUp,
        Action::BudgetDown,
        Action::DepthUp,
        Action::DepthDown,
        Action::TempUp,
        Action::TempDown,
        Action::Regenerate,
        Action::NewChat,
        Action::ToggleTree,
        Action::ToggleColour,
        Action::ToggleReasoning,
        Action::CycleTheme,
        Action::Help,
        Action::PageUp,
        Action::PageDown,
        Action::ScrollUp,
        Action::ScrollDown,
        Action::ScrollBottom,
    ];

    /// Name used in the config file (`[keys]` table).
    pub fn name(self) -> &'static str {
        match self {
            Action::Send => "send",
            Action::Newline => "newline",
            Action::Stop => "stop",
            Action::Quit => "quit",
            Action::CycleMode => "cycle_mode",
            Action::BudgetUp => "budget_up",
            Action::BudgetDown => "budget_down",
            Action::DepthUp => "depth_up",
            Action::DepthDown => "depth_down",
            Action::TempUp => "temperature_up",
            Action::TempDown => "temperature_down",
            Action::Regenerate => "regenerate",
            Action::NewChat => "new_chat",
            Action::ToggleTree => "toggle_tree",
            Action::ToggleColour => "toggle_colour",
            Action::ToggleReasoning => "toggle_reasoning",
            Action::CycleTheme => "cycle_theme",
            Action::Help => "help",
            Action::PageUp => "page_up",
            Action::PageDown => "page_down",
            Action::ScrollUp => "scroll_up",
            Action::ScrollDown => "scroll_down",
            Action::ScrollBottom => "scroll_bottom",
        }
    }

    /// What it does, for the help.
    pub fn describe(self) -> &'static str {
        match self {
            Action::Send => "send the message / run a /command",
            Action::Newline => "new line in the message",
            Action::Stop => "stop the answer (Ctrl+C twice when idle quits)",
            Action::Quit => "quit",
            Action::CycleMode => "next mode: ar, linear, tree, mtp",
            Action::BudgetUp => "tree budget up (chain length in linear)",
            Action::BudgetDown => "tree budget down (chain length in linear)",
            Action::DepthUp => "tree depth up",
            Action::DepthDown => "tree depth down",
            Action::TempUp => "temperature up 0.1",
            Action::TempDown => "temperature down 0.1",
            Action::Regenerate => "answer the last message again",
            Action::NewChat => "new chat",
            Action::ToggleTree => "show / hide the draft tree",
            Action::ToggleColour => "colour tokens by origin on / off",
            Action::ToggleReasoning => "unfold / fold a thinking model's reasoning",
            Action::CycleTheme => "next theme",
            Action::Help => "this help",
            Action::PageUp => "scroll up a page",
            Action::PageDown => "scroll down a page",
            Action::ScrollUp => "scroll up a line",
            Action::ScrollDown => "scroll down a line",
            Action::ScrollBottom => "follow the newest output",
        }
    }

    /// Parse a config-file name.
    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// A key with its modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key.
    pub code: KeyCode,
    /// Ctrl, Alt, Shift.
    pub mods: KeyModifiers,
}

impl Key {
    /// A key without modifiers.
    pub const fn plain(code: KeyCode) -> Self {
        Key {
            code,
            mods: KeyModifiers::NONE,
        }
    }

    /// Ctrl plus a character.
    pub const fn ctrl(c: char) -> Self {
        Key {
            code: KeyCode::Char(c),
            mods: KeyModifiers::CONTROL,
        }
    }

    /// Alt plus a key.
    pub const fn alt(code: KeyCode) -> Self {
        Key {
            code,
            mods: KeyModifiers::ALT,
        }
    }

    /// Does this key event match (Shift is ignored for characters, which carry their case)?
    pub fn matches(&self, ev: &KeyEvent) -> bool {
        let mut mods = ev.modifiers;
        if matches!(ev.code, KeyCode::Char(_)) {
            mods.remove(KeyModifiers::SHIFT);
        }
        let code = match ev.code {
            KeyCode::Char(c) if mods.contains(KeyModifiers::CONTROL) => {
                KeyCode::Char(c.to_ascii_lowercase())
            }
            c => c,
        };
        code == self.code && mods == self.mods
    }

    /// Parse `ctrl+r`, `alt+enter`, `f2`, `pageup`, `?` ... (what [`Key`]'s `Display` writes
    /// reads back).
    pub fn parse(spec: &str) -> Option<Key> {
        let mut mods = KeyModifiers::NONE;
        let parts: Vec<&str> = spec.split('+').collect();
        let (last, prefix) = parts.split_last()?;
        for p in prefix {
            match p.trim().to_ascii_lowercase().as_str() {
                "ctrl" | "control" => mods |= KeyModifiers::CONTROL,
                "alt" | "meta" => mods |= KeyModifiers::ALT,
                "shift" => mods |= KeyModifiers::SHIFT,
                _ => return None,
            }
        }
        let l = last.trim();
        let code = match l.to_ascii_lowercase().as_str() {
            "enter" | "return" => KeyCode::Enter,
            "esc" | "escape" => KeyCode::Esc,
            "tab" => KeyCode::Tab,
            "backspace" => KeyCode::Backspace,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            "pageup" | "pgup" => KeyCode::PageUp,
            "pagedown" | "pgdn" => KeyCode::PageDown,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            "space" => KeyCode::Char(' '),
            f if f.len() > 1 && f.starts_with('f') => KeyCode::F(f[1..].parse().ok()?),
            _ => {
                let mut chars = l.chars();
                let c = chars.next()?;
                if chars.next().is_some() {
                    return None;
                }
                KeyCode::Char(if mods.contains(KeyModifiers::CONTROL) {
                    c.to_ascii_lowercase()
                } else {
                    c
                })
            }
        };
        Some(Key { code, mods })
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.mods.contains(KeyModifiers::CONTROL) {
            f.write_str("Ctrl+")?;
        }
        if self.mods.contains(KeyModifiers::ALT) {
            f.write_str("Alt+")?;
        }
        if self.mods.contains(KeyModifiers::SHIFT) {
            f.write_str("Shift+")?;
        }
        match self.code {
            KeyCode::Char(' ') => f.write_str("Space"),
            KeyCode::Char(c) if self.mods.contains(KeyModifiers::CONTROL) => {
                write!(f, "{}", c.to_ascii_uppercase())
            }
            KeyCode::Char(c) => write!(f, "{c}"),
            KeyCode::F(n) => write!(f, "F{n}"),
            KeyCode::Enter => f.write_str("Enter"),
            KeyCode::Esc => f.write_str("Esc"),
            KeyCode::PageUp => f.write_str("PgUp"),
            KeyCode::PageDown => f.write_str("PgDn"),
            KeyCode::Up => f.write_str("Up"),
            KeyCode::Down => f.write_str("Down"),
            KeyCode::Left => f.write_str("Left"),
            KeyCode::Right => f.write_str("Right"),
            KeyCode::Home => f.write_str("Home"),
            KeyCode::End => f.write_str("End"),
            KeyCode::Tab => f.write_str("Tab"),
            KeyCode::Backspace => f.write_str("Backspace"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// The bindings in force.
#[derive(Debug, Clone)]
pub struct Keymap {
    bindings: Vec<(Key, Action)>,
}

impl Default for Keymap {
    fn default() -> Self {
        use Action::*;
        use KeyCode as K;
        let b = |k: Key, a: Action| (k, a);
        Keymap {
            bindings: vec![
                b(Key::plain(K::Enter), Send),
                b(Key::ctrl('j'), Newline),
                b(Key::alt(K::Enter), Newline),
                b(Key::plain(K::Esc), Stop),
                b(Key::ctrl('c'), Stop),
                b(Key::ctrl('q'), Quit),
                b(Key::plain(K::F(2)), CycleMode),
                b(Key::ctrl('t'), CycleMode),
                b(Key::plain(K::F(4)), BudgetUp),
                b(Key::plain(K::F(3)), BudgetDown),
                b(Key::alt(K::Char('=')), BudgetUp),
                b(Key::alt(K::Char('-')), BudgetDown),
                b(Key::alt(K::Char('.')), DepthUp),
                b(Key::alt(K::Char(',')), DepthDown),
                b(Key::plain(K::F(6)), TempUp),
                b(Key::plain(K::F(5)), TempDown),
                b(Key::ctrl('r'), Regenerate),
                b(Key::ctrl('n'), NewChat),
                b(Key::plain(K::F(7)), ToggleTree),
                b(Key::alt(K::Char('t')), ToggleTree),
                b(Key::plain(K::F(8)), ToggleColour),
                b(Key::alt(K::Char('c')), ToggleColour),
                b(Key::plain(K::F(10)), ToggleReasoning),
                b(Key::alt(K::Char('r')), ToggleReasoning),
                b(Key::plain(K::F(9)), CycleTheme),
                b(Key::plain(K::F(1)), Help),
                b(Key::plain(K::PageUp), PageUp),
                b(Key::plain(K::PageDown), PageDown),
                b(
                    Key {
                        code: K::Up,
                        mods: KeyModifiers::SHIFT,
                    },
                    ScrollUp,
                ),
                b(
                    Key {
                        code: K::Down,
                        mods: KeyModifiers::SHIFT,
                    },
                    ScrollDown,
                ),
                b(
                    Key {
                        code: K::End,
                        mods: KeyModifiers::CONTROL,
                    },
                    ScrollBottom,
                ),
            ],
        }
    }
}

impl Keymap {
    /// The default map with the config file's `[keys]` overrides (action name to a list of key
    /// specs; an action named there loses its default keys). Returns problems found.
    pub fn with_overrides(overrides: &BTreeMap<String, Vec<String>>) -> (Self, Vec<String>) {
        let mut map = Keymap::default();
        let mut problems = vec![];
        for (name, keys) in overrides {
            let Some(action) = Action::parse(name) else {
                problems.push(format!("[keys]: unknown action `{name}`"));
                continue;
            };
            let parsed: Vec<Key> = keys
                .iter()
                .filter_map(|k| {
                    let p = Key::parse(k);
                    if p.is_none() {
                        problems.push(format!("[keys] {name}: cannot read key `{k}`"));
                    }
                    p
                })
                .collect();
            if parsed.is_empty() {
                continue;
            }
            map.bindings
                .retain(|(k, a)| *a != action && !parsed.contains(k));
            for k in parsed {
                map.bindings.push((k, action));
            }
        }
        (map, problems)
    }

    /// The action bound to a key event.
    pub fn action(&self, ev: &KeyEvent) -> Option<Action> {
        self.bindings
            .iter()
            .find(|(k, _)| k.matches(ev))
            .map(|(_, a)| *a)
    }

    /// The keys bound to an action, as text.
    pub fn keys(&self, action: Action) -> Vec<String> {
        self.bindings
            .iter()
            .filter(|(_, a)| *a == action)
            .map(|(k, _)| k.to_string())
            .collect()
    }

    /// The first key bound to an action, as text ("" when none).
    pub fn first_key(&self, action: Action) -> String {
        self.keys(action).into_iter().next().unwrap_or_default()
    }

    /// Help lines: (keys, description), one per bound action.
    pub fn help(&self) -> Vec<(String, &'static str)> {
        Action::ALL
            .into_iter()
            .filter_map(|a| {
                let keys = self.keys(a);
                (!keys.is_empty()).then(|| (keys.join(", "), a.describe()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn key_strings() {
        assert_eq!(Key::parse("ctrl+o"), Some(Key::ctrl('o')));
        assert_eq!(Key::parse("Ctrl+O"), Some(Key::ctrl('o')), "any case");
        assert_eq!(Key::parse("control + o"), Some(Key::ctrl('o')));
        assert_eq!(Key::parse("alt+="), Some(Key::alt(KeyCode::Char('='))));
        assert_eq!(Key::parse("meta+,"), Some(Key::alt(KeyCode::Char(','))));
        assert_eq!(Key::parse("alt+enter"), Some(Key::alt(KeyCode::Enter)));
        assert_eq!(Key::parse("f2"), Some(Key::plain(KeyCode::F(2))));
        assert_eq!(Key::parse("F12"), Some(Key::plain(KeyCode::F(12))));
        assert_eq!(Key::parse("?"), Some(Key::plain(KeyCode::Char('?'))));
        assert_eq!(Key::parse("space"), Some(Key::plain(KeyCode::Char(' '))));
        assert_eq!(Key::parse("esc"), Some(Key::plain(KeyCode::Esc)));
        assert_eq!(Key::parse("pgdn"), Some(Key::plain(KeyCode::PageDown)));
        assert_eq!(
            Key::parse("shift+up"),
            Some(Key {
                code: KeyCode::Up,
                mods: KeyModifiers::SHIFT
            })
        );
        assert_eq!(
            Key::parse("ctrl+alt+x"),
            Some(Key {
                code: KeyCode::Char('x'),
                mods: KeyModifiers::CONTROL | KeyModifiers::ALT
            })
        );
        // Without Ctrl a character keeps its case.
        assert_eq!(Key::parse("alt+T"), Some(Key::alt(KeyCode::Char('T'))));
    }

    #[test]
    fn bad_key_strings() {
        for bad in [
            "", "ctrl+", "+", "hyper+x", "ctrl+xy", "enterr", "fx", "f999", "ctrl+alt",
        ] {
            assert_eq!(Key::parse(bad), None, "`{bad}`");
        }
        // `f` alone is the letter.
        assert_eq!(Key::parse("f"), Some(Key::plain(KeyCode::Char('f'))));
    }

    #[test]
    fn every_default_key_reads_back_from_its_name() {
        for (key, action) in &Keymap::default().bindings {
            let shown = key.to_string();
            assert_eq!(Key::parse(&shown), Some(*key), "{shown} ({action:?})");
        }
    }

    #[test]
    fn matching_ignores_shift_on_characters_and_case_under_ctrl() {
        let question = Key::plain(KeyCode::Char('?'));
        assert!(question.matches(&ev(KeyCode::Char('?'), KeyModifiers::SHIFT)));
        assert!(Key::ctrl('c').matches(&ev(
            KeyCode::Char('C'),
            KeyModifiers::CONTROL | KeyModifiers::SHIFT
        )));
        assert!(!Key::ctrl('c').matches(&ev(KeyCode::Char('c'), KeyModifiers::NONE)));
        let shift_up = Key::parse("shift+up").unwrap();
        assert!(shift_up.matches(&ev(KeyCode::Up, KeyModifiers::SHIFT)));
        assert!(!shift_up.matches(&ev(KeyCode::Up, KeyModifiers::NONE)));
    }

    #[test]
    fn overrides_replace_an_actions_keys_and_report_problems() {
        let mut o = BTreeMap::new();
        o.insert("cycle_mode".to_string(), vec!["ctrl+o".to_string()]);
        o.insert(
            "help".to_string(),
            vec!["f2".to_string(), "bogus key".to_string()],
        );
        o.insert("frobnicate".to_string(), vec!["f12".to_string()]);
        let (map, problems) = Keymap::with_overrides(&o);
        assert_eq!(map.keys(Action::CycleMode), ["Ctrl+O"]);
        // F2 moved from cycle_mode to help; F1 is no longer help's.
        assert_eq!(map.keys(Action::Help), ["F2"]);
        assert_eq!(
            map.action(&ev(KeyCode::F(2), KeyModifiers::NONE)),
            Some(Action::Help)
        );
        assert_eq!(map.action(&ev(KeyCode::F(1), KeyModifiers::NONE)), None);
        assert_eq!(
            problems,
            [
                "[keys]: unknown action `frobnicate`",
                "[keys] help: cannot read key `bogus key`"
            ]
        );
        assert_eq!(map.first_key(Action::Send), "Enter");
    }

    #[test]
    fn every_action_has_a_name_that_parses_and_a_default_key() {
        let map = Keymap::default();
        for a in Action::ALL {
            assert_eq!(Action::parse(a.name()), Some(a));
            assert!(!map.keys(a).is_empty(), "{a:?} has no key");
        }
        assert_eq!(map.help().len(), Action::ALL.len());
    }
}
