//! Themes: TOML files (`themes/` in the repository, bundled into the binary; user themes from
//! `<config>/treespec/themes/`), with a built-in fallback when a file cannot be used.
//!
//! A theme file has a `name`, an optional `[palette]` of named colours, `[styles]` (one per
//! [`StyleKey`]) whose colours are palette names, colour names, `#rrggbb` or 0-255 indices, and
//! a `[drafted]` list of colours by tree depth. With `inherits = "other"` it starts from every
//! style, palette entry and depth colour of that theme and overrides only what it sets itself
//! (see [`load`]).

pub mod load;

pub use load::ThemeError;

use ratatui::style::{Color, Modifier, Style};

/// The themes shipped with treespec (file name, contents).
pub const BUNDLED: [(&str, &str); 3] = [
    ("dark.toml", include_str!("../../../themes/dark.toml")),
    ("light.toml", include_str!("../../../themes/light.toml")),
    (
        "high-contrast.toml",
        include_str!("../../../themes/high-contrast.toml"),
    ),
];

/// A style a theme defines, named in theme files by [`StyleKey::name`] (`status_mode`, ...).
/// The per-depth colours of accepted draft tokens are not a style key: they are the theme's
/// `[drafted]` list (see [`Theme::drafted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StyleKey {
    /// The background of the whole screen.
    Base,
    /// Panel borders.
    Border,
    /// The border of the panel that takes the keys (the input box while idle).
    BorderFocus,
    /// Panel titles and section headings.
    Title,
    /// "You".
    UserLabel,
    /// The user's messages.
    UserText,
    /// "Assistant".
    AssistantLabel,
    /// The system prompt.
    SystemText,
    /// Answer text without colouring (and ordinary help text).
    Plain,
    /// The target's own tokens (bonus or correction) in a speculative answer.
    Target,
    /// The status bar.
    Status,
    /// The mode in force, in the status bar.
    StatusMode,
    /// The other modes and the separators in the status bar.
    StatusDim,
    /// The key bar.
    Keybar,
    /// Keys, in the key bar and the help.
    Key,
    /// Text typed in the input box.
    Input,
    /// Hints shown where there is nothing yet.
    Placeholder,
    /// A thinking model's reasoning, and its folded line.
    Reasoning,
    /// Code in an answer (fenced blocks and code spans), laid over the tokens' colours: set a
    /// background here, not a foreground, so that their origins stay visible.
    Code,
    /// Markdown's marks in an answer (fences, `#`, `**`, backticks, `>`), dimmed.
    Markup,
    /// The root of the draft tree.
    TreeRoot,
    /// Drafted nodes the target did not accept.
    TreeNode,
    /// The accepted path of the draft tree.
    TreeAccepted,
    /// The target's own token after the accepted path.
    TreeNext,
    /// Secondary text in the tree panel (timings, indentation, counts).
    TreeDim,
    /// Error notices.
    Error,
    /// Other notices.
    Notice,
    /// Modes that cannot run (patched over their usual style).
    Disabled,
}

impl StyleKey {
    /// Every style key, in the order theme files list them.
    pub const ALL: [StyleKey; 28] = [
        StyleKey::Base,
        StyleKey::Border,
        StyleKey::BorderFocus,
        StyleKey::Title,
        StyleKey::UserLabel,
        StyleKey::UserText,
        StyleKey::AssistantLabel,
        StyleKey::SystemText,
        StyleKey::Plain,
        StyleKey::Target,
        StyleKey::Status,
        StyleKey::StatusMode,
        StyleKey::StatusDim,
        StyleKey::Keybar,
        StyleKey::Key,
        StyleKey::Input,
        StyleKey::Placeholder,
        StyleKey::Reasoning,
        StyleKey::Code,
        StyleKey::Markup,
        StyleKey::TreeRoot,
        StyleKey::TreeNode,
        StyleKey::TreeAccepted,
        StyleKey::TreeNext,
        StyleKey::TreeDim,
        StyleKey::Error,
        StyleKey::Notice,
        StyleKey::Disabled,
    ];

    /// The key's name in theme files.
    pub fn name(self) -> &'static str {
        match self {
            StyleKey::Base => "base",
            StyleKey::Border => "border",
            StyleKey::BorderFocus => "border_focus",
            StyleKey::Title => "title",
            StyleKey::UserLabel => "user_label",
            StyleKey::UserText => "user_text",
            StyleKey::AssistantLabel => "assistant_label",
            StyleKey::SystemText => "system_text",
            StyleKey::Plain => "plain",
            StyleKey::Target => "target",
            StyleKey::Status => "status",
            StyleKey::StatusMode => "status_mode",
            StyleKey::StatusDim => "status_dim",
            StyleKey::Keybar => "keybar",
            StyleKey::Key => "key",
            StyleKey::Input => "input",
            StyleKey::Placeholder => "placeholder",
            StyleKey::Reasoning => "reasoning",
            StyleKey::Code => "code",
            StyleKey::Markup => "markup",
            StyleKey::TreeRoot => "tree_root",
            StyleKey::TreeNode => "tree_node",
            StyleKey::TreeAccepted => "tree_accepted",
            StyleKey::TreeNext => "tree_next",
            StyleKey::TreeDim => "tree_dim",
            StyleKey::Error => "error",
            StyleKey::Notice => "notice",
            StyleKey::Disabled => "disabled",
        }
    }

    /// The key a theme file names (`None` for an unknown name).
    pub fn parse(name: &str) -> Option<StyleKey> {
        StyleKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Position in [`StyleKey::ALL`].
    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for StyleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of every style key, for messages.
fn known_keys() -> String {
    StyleKey::ALL.map(StyleKey::name).join(", ")
}

/// A resolved theme.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    /// Its name.
    pub name: String,
    styles: [Style; StyleKey::ALL.len()],
    drafted: Vec<Color>,
}

/// Parse a colour: a name (`red`, `lightblue`, `gray`, `reset`, ...), `#rrggbb`, or an index.
pub fn parse_color(s: &str) -> Option<Color> {
    let s = s.trim().to_ascii_lowercase();
    if let Some(hex) = s.strip_prefix('#') {
        if hex.len() == 6 {
            let v = u32::from_str_radix(hex, 16).ok()?;
            return Some(Color::Rgb((v >> 16) as u8, (v >> 8) as u8, v as u8));
        }
        return None;
    }
    if let Ok(i) = s.parse::<u8>() {
        return Some(Color::Indexed(i));
    }
    Some(match s.replace(['-', '_', ' '], "").as_str() {
        "reset" | "default" => Color::Reset,
        "black" => Color::Black,
        "red" => Color::Red,
        "green" => Color::Green,
        "yellow" => Color::Yellow,
        "blue" => Color::Blue,
        "magenta" => Color::Magenta,
        "cyan" => Color::Cyan,
        "gray" | "grey" => Color::Gray,
        "darkgray" | "darkgrey" => Color::DarkGray,
        "lightred" => Color::LightRed,
        "lightgreen" => Color::LightGreen,
        "lightyellow" => Color::LightYellow,
        "lightblue" => Color::LightBlue,
        "lightmagenta" => Color::LightMagenta,
        "lightcyan" => Color::LightCyan,
        "white" => Color::White,
        _ => return None,
    })
}

impl Theme {
    /// The built-in fallback (used when no theme file can be read).
    pub fn fallback() -> Self {
        use StyleKey as K;
        let plain = Style::default();
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let mut theme = Theme {
            name: "fallback".into(),
            styles: [plain; StyleKey::ALL.len()],
            drafted: vec![Color::Green, Color::Cyan, Color::Blue, Color::Magenta],
        };
        for (k, s) in [
            (K::Title, bold),
            (K::UserLabel, bold.fg(Color::Yellow)),
            (K::AssistantLabel, bold.fg(Color::Green)),
            (K::Target, plain.fg(Color::Yellow)),
            (K::Status, plain.add_modifier(Modifier::REVERSED)),
            (K::StatusMode, bold.add_modifier(Modifier::REVERSED)),
            (K::StatusDim, plain.add_modifier(Modifier::REVERSED)),
            (K::Key, bold),
            (K::TreeAccepted, bold.add_modifier(Modifier::REVERSED)),
            (K::TreeNext, bold.fg(Color::Yellow)),
            (K::Error, bold.fg(Color::Red)),
            (K::Disabled, plain.add_modifier(Modifier::DIM)),
            (K::Markup, plain.add_modifier(Modifier::DIM)),
        ] {
            theme.styles[k.index()] = s;
        }
        theme
    }

    /// The style of a key.
    pub fn style(&self, key: StyleKey) -> Style {
        self.styles[key.index()]
    }

    /// The colour of accepted draft tokens at `depth` (1-based; the last colour repeats).
    pub fn drafted(&self, depth: usize) -> Style {
        let i = depth
            .saturating_sub(1)
            .min(self.drafted.len().saturating_sub(1));
        let base = self.style(StyleKey::Plain);
        match self.drafted.get(i) {
            Some(&c) => base.fg(c),
            None => base,
        }
    }

    /// Number of depth shades.
    pub fn drafted_shades(&self) -> usize {
        self.drafted.len()
    }
}
