//! Themes: TOML files (`themes/` in the repository, bundled into the binary; user themes from
//! `<config>/treespec/themes/`), with a built-in fallback when a file cannot be used.

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The themes shipped with treespec (file name, contents).
pub const BUNDLED: [(&str, &str); 3] = [
    ("dark.toml", include_str!("../../themes/dark.toml")),
    ("light.toml", include_str!("../../themes/light.toml")),
    (
        "high-contrast.toml",
        include_str!("../../themes/high-contrast.toml"),
    ),
];

/// Every style key a theme defines.
pub const KEYS: [&str; 26] = [
    "base",
    "border",
    "border_focus",
    "title",
    "user_label",
    "user_text",
    "assistant_label",
    "system_text",
    "plain",
    "target",
    "status",
    "status_mode",
    "status_dim",
    "keybar",
    "key",
    "input",
    "placeholder",
    "tree_root",
    "tree_node",
    "tree_accepted",
    "tree_next",
    "tree_dim",
    "error",
    "notice",
    "disabled",
    "drafted",
];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StyleSpec {
    fg: Option<String>,
    bg: Option<String>,
    #[serde(default)]
    bold: bool,
    #[serde(default)]
    italic: bool,
    #[serde(default)]
    underline: bool,
    #[serde(default)]
    dim: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThemeFile {
    name: String,
    styles: BTreeMap<String, StyleSpec>,
    drafted: Option<Drafted>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Drafted {
    depths: Vec<String>,
}

/// A resolved theme.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    /// Its name.
    pub name: String,
    styles: BTreeMap<String, Style>,
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
        let mut styles = BTreeMap::new();
        let plain = Style::default();
        for k in KEYS {
            styles.insert(k.to_string(), plain);
        }
        let bold = Style::default().add_modifier(Modifier::BOLD);
        styles.insert("title".into(), bold);
        styles.insert("user_label".into(), bold.fg(Color::Yellow));
        styles.insert("assistant_label".into(), bold.fg(Color::Green));
        styles.insert("target".into(), plain.fg(Color::Yellow));
        styles.insert("status".into(), plain.add_modifier(Modifier::REVERSED));
        styles.insert("status_mode".into(), bold.add_modifier(Modifier::REVERSED));
        styles.insert("status_dim".into(), plain.add_modifier(Modifier::REVERSED));
        styles.insert("key".into(), bold);
        styles.insert(
            "tree_accepted".into(),
            bold.add_modifier(Modifier::REVERSED),
        );
        styles.insert("tree_next".into(), bold.fg(Color::Yellow));
        styles.insert("error".into(), bold.fg(Color::Red));
        styles.insert("disabled".into(), plain.add_modifier(Modifier::DIM));
        Theme {
            name: "fallback".into(),
            styles,
            drafted: vec![Color::Green, Color::Cyan, Color::Blue, Color::Magenta],
        }
    }

    /// Parse a theme file. Every key must be known and every colour valid; keys the file leaves
    /// out take the fallback's style.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let file: ThemeFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut theme = Theme::fallback();
        theme.name = file.name;
        for (key, spec) in file.styles {
            if !KEYS.contains(&key.as_str()) || key == "drafted" {
                return Err(format!("unknown style `{key}`"));
            }
            theme.styles.insert(key.clone(), resolve(&key, &spec)?);
        }
        if let Some(d) = file.drafted {
            if d.depths.is_empty() {
                return Err("drafted.depths is empty".into());
            }
            theme.drafted = d
                .depths
                .iter()
                .map(|c| parse_color(c).ok_or_else(|| format!("drafted: unknown colour `{c}`")))
                .collect::<Result<_, _>>()?;
        }
        Ok(theme)
    }

    /// The bundled themes, then the user's (from `dir`, if it exists). Files that fail to parse
    /// are skipped, with a message for each.
    pub fn load_all(user_dir: Option<&Path>) -> (Vec<Theme>, Vec<String>) {
        let mut themes = vec![];
        let mut problems = vec![];
        for (file, text) in BUNDLED {
            match Theme::from_toml(text) {
                Ok(t) => themes.push(t),
                Err(e) => problems.push(format!("bundled theme {file}: {e}")),
            }
        }
        if let Some(dir) = user_dir {
            let mut files: Vec<_> = std::fs::read_dir(dir)
                .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            files.sort();
            for p in files
                .into_iter()
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            {
                match std::fs::read_to_string(&p)
                    .map_err(|e| e.to_string())
                    .and_then(|t| Theme::from_toml(&t))
                {
                    Ok(t) => {
                        themes.retain(|x| x.name != t.name);
                        themes.push(t);
                    }
                    Err(e) => problems.push(format!("theme {}: {e}", p.display())),
                }
            }
        }
        if themes.is_empty() {
            themes.push(Theme::fallback());
        }
        (themes, problems)
    }

    /// The style of a key (the default style for an unknown key).
    pub fn style(&self, key: &str) -> Style {
        self.styles.get(key).copied().unwrap_or_default()
    }

    /// The colour of accepted draft tokens at `depth` (1-based; the last colour repeats).
    pub fn drafted(&self, depth: usize) -> Style {
        let i = depth
            .saturating_sub(1)
            .min(self.drafted.len().saturating_sub(1));
        let base = self.style("plain");
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

fn resolve(key: &str, s: &StyleSpec) -> Result<Style, String> {
    let color = |c: &Option<String>| -> Result<Option<Color>, String> {
        match c {
            Some(c) => parse_color(c)
                .map(Some)
                .ok_or_else(|| format!("{key}: unknown colour `{c}`")),
            None => Ok(None),
        }
    };
    let mut style = Style::default();
    if let Some(fg) = color(&s.fg)? {
        style = style.fg(fg);
    }
    if let Some(bg) = color(&s.bg)? {
        style = style.bg(bg);
    }
    for (on, m) in [
        (s.bold, Modifier::BOLD),
        (s.italic, Modifier::ITALIC),
        (s.underline, Modifier::UNDERLINED),
        (s.dim, Modifier::DIM),
    ] {
        if on {
            style = style.add_modifier(m);
        }
    }
    Ok(style)
}
