//! Reading theme files: the `[palette]`, `inherits`, and the bundled and user themes together.
//!
//! A colour in `[styles]` or `[drafted]` is looked up in the palette first, then read as a colour
//! name, `#rrggbb` or a 0-255 index; palette entries themselves are colours of the latter kinds.
//! A theme that `inherits` another takes its palette, styles and depth colours, then applies its
//! own: its palette entries replace the parent's (so the parent's styles that name them change
//! too), each style it sets replaces the parent's style of that key, and its `[drafted]` list
//! replaces the parent's. A user theme may inherit a bundled or another user theme; a user theme
//! that inherits its own name (a `dark.toml` with `inherits = "dark"`) builds on the bundled
//! theme of that name. Styles no theme in the chain sets take the built-in fallback's.

use super::{known_keys, parse_color, StyleKey, Theme, BUNDLED};
use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Why a theme file cannot be used. The messages are one line each; [`Theme::load_all`] puts
/// the file's name in front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThemeError {
    /// Not TOML, a field of the wrong type, or an unknown field.
    #[error("{0}")]
    Syntax(String),
    /// A `[styles]` key that is not a [`StyleKey`].
    #[error("unknown style `{key}` (the styles are {known})")]
    UnknownStyle {
        /// The key the file names.
        key: String,
        /// The known keys, listed.
        known: String,
    },
    /// A colour that is neither a palette entry nor a colour.
    #[error("{place}: unknown colour `{colour}` (not in the palette, and not a colour name, #rrggbb or 0-255)")]
    UnknownColour {
        /// Where it was used: `styles.base.fg`, `palette.bg`, `drafted.depths[2]`.
        place: String,
        /// The colour as written.
        colour: String,
    },
    /// `[drafted] depths = []`.
    #[error("drafted.depths is empty")]
    NoDepths,
    /// `inherits` names no theme.
    #[error("theme `{theme}` inherits `{parent}`, which is not a theme (the themes are {known})")]
    UnknownParent {
        /// The theme that inherits.
        theme: String,
        /// The name it inherits.
        parent: String,
        /// The themes there are.
        known: String,
    },
    /// Themes that inherit each other in a circle.
    #[error("themes inherit in a cycle: {0}")]
    Cycle(String),
}

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
struct FileToml {
    name: String,
    inherits: Option<String>,
    #[serde(default)]
    palette: BTreeMap<String, String>,
    #[serde(default)]
    styles: BTreeMap<String, StyleSpec>,
    drafted: Option<DraftedToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DraftedToml {
    depths: Vec<String>,
}

/// A theme file read and checked, colours not yet resolved (an heir may change the palette).
#[derive(Debug, Clone)]
struct ThemeFile {
    name: String,
    inherits: Option<String>,
    palette: BTreeMap<String, String>,
    styles: BTreeMap<StyleKey, StyleSpec>,
    drafted: Option<Vec<String>>,
}

impl ThemeFile {
    fn parse(text: &str) -> Result<Self, ThemeError> {
        let raw: FileToml = toml::from_str(text).map_err(|e| {
            let msg = crate::error::one_line(e.message());
            ThemeError::Syntax(match e.span() {
                Some(span) => {
                    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                    format!("line {line}: {msg}")
                }
                None => msg,
            })
        })?;
        let mut styles = BTreeMap::new();
        for (name, spec) in raw.styles {
            let key = StyleKey::parse(&name).ok_or_else(|| ThemeError::UnknownStyle {
                key: name.clone(),
                known: known_keys(),
            })?;
            styles.insert(key, spec);
        }
        let drafted = match raw.drafted {
            Some(d) if d.depths.is_empty() => return Err(ThemeError::NoDepths),
            Some(d) => Some(d.depths),
            None => None,
        };
        for (name, colour) in &raw.palette {
            if parse_color(colour).is_none() {
                return Err(ThemeError::UnknownColour {
                    place: format!("palette.{name}"),
                    colour: colour.clone(),
                });
            }
        }
        Ok(ThemeFile {
            name: raw.name,
            inherits: raw.inherits,
            palette: raw.palette,
            styles,
            drafted,
        })
    }

    /// This file applied over its parent's (already flattened) file.
    fn over(&self, parent: ThemeFile) -> ThemeFile {
        let mut out = parent;
        out.name = self.name.clone();
        out.inherits = None;
        out.palette.extend(self.palette.clone());
        out.styles.extend(self.styles.clone());
        if self.drafted.is_some() {
            out.drafted = self.drafted.clone();
        }
        out
    }

    /// Resolve every colour: the finished theme.
    fn resolve(&self) -> Result<Theme, ThemeError> {
        let colour = |place: String, c: &str| -> Result<Color, ThemeError> {
            self.palette
                .get(c)
                .map_or(Some(c), |p| Some(p.as_str()))
                .and_then(parse_color)
                .ok_or(ThemeError::UnknownColour {
                    place,
                    colour: c.to_string(),
                })
        };
        let mut theme = Theme::fallback();
        theme.name = self.name.clone();
        for (key, spec) in &self.styles {
            let mut style = Style::default();
            if let Some(fg) = &spec.fg {
                style = style.fg(colour(format!("styles.{key}.fg"), fg)?);
            }
            if let Some(bg) = &spec.bg {
                style = style.bg(colour(format!("styles.{key}.bg"), bg)?);
            }
            for (on, m) in [
                (spec.bold, Modifier::BOLD),
                (spec.italic, Modifier::ITALIC),
                (spec.underline, Modifier::UNDERLINED),
                (spec.dim, Modifier::DIM),
            ] {
                if on {
                    style = style.add_modifier(m);
                }
            }
            theme.styles[key.index()] = style;
        }
        if let Some(depths) = &self.drafted {
            theme.drafted = depths
                .iter()
                .enumerate()
                .map(|(i, c)| colour(format!("drafted.depths[{i}]"), c))
                .collect::<Result<_, _>>()?;
        }
        Ok(theme)
    }
}

/// Theme files by name in two layers: the bundled ones and the user's (which replace bundled
/// ones of the same name).
#[derive(Debug, Default)]
struct Library {
    /// Bundled theme names in the order they ship.
    order: Vec<String>,
    bundled: BTreeMap<String, ThemeFile>,
    user: BTreeMap<String, ThemeFile>,
}

impl Library {
    /// The bundled files (and a message for each that cannot be read).
    fn bundled() -> (Self, Vec<String>) {
        let mut lib = Library::default();
        let mut problems = vec![];
        for (file, text) in BUNDLED {
            match ThemeFile::parse(text) {
                Ok(t) => {
                    lib.order.push(t.name.clone());
                    lib.bundled.insert(t.name.clone(), t);
                }
                Err(e) => problems.push(format!("bundled theme {file}: {e}")),
            }
        }
        (lib, problems)
    }

    fn known(&self) -> String {
        let mut names: Vec<&str> = self
            .bundled
            .keys()
            .chain(self.user.keys())
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names.dedup();
        names.join(", ")
    }

    /// `file` (from the user layer when `user`) with everything it inherits applied under it.
    /// `chain` holds the themes already on the way, for cycles.
    fn flatten(
        &self,
        file: &ThemeFile,
        user: bool,
        chain: &mut Vec<(String, bool)>,
    ) -> Result<ThemeFile, ThemeError> {
        chain.push((file.name.clone(), user));
        let Some(parent) = &file.inherits else {
            return Ok(file.clone());
        };
        // A user theme that inherits its own name builds on the bundled theme of that name;
        // otherwise user themes see the user layer first, bundled themes only bundled ones.
        let from_user = user && *parent != file.name && self.user.contains_key(parent);
        let found = if from_user {
            self.user.get(parent)
        } else {
            self.bundled.get(parent)
        };
        if chain.contains(&(parent.clone(), from_user)) || (found.is_none() && *parent == file.name)
        {
            let mut names: Vec<&str> = chain.iter().map(|(n, _)| n.as_str()).collect();
            names.push(parent);
            return Err(ThemeError::Cycle(names.join(" → ")));
        }
        let Some(found) = found else {
            return Err(ThemeError::UnknownParent {
                theme: file.name.clone(),
                parent: parent.clone(),
                known: self.known(),
            });
        };
        Ok(file.over(self.flatten(found, from_user, chain)?))
    }

    /// The finished theme of `file`.
    fn theme(&self, file: &ThemeFile, user: bool) -> Result<Theme, ThemeError> {
        self.flatten(file, user, &mut vec![])?.resolve()
    }
}

impl Theme {
    /// Read one theme file. Every style key must be known and every colour valid; keys the file
    /// (and what it inherits) leaves out take the fallback's style. `inherits` may name a
    /// bundled theme.
    pub fn from_toml(text: &str) -> Result<Self, ThemeError> {
        let (lib, _) = Library::bundled();
        lib.theme(&ThemeFile::parse(text)?, true)
    }

    /// The bundled themes, then the user's (`*.toml` in `user_dir`, if it exists, in file-name
    /// order; a user theme replaces a bundled one of the same name). Files that cannot be used
    /// are skipped, with a message naming the file for each.
    pub fn load_all(user_dir: Option<&Path>) -> (Vec<Theme>, Vec<String>) {
        let (mut lib, mut problems) = Library::bundled();
        // User files by name (a later file of the same name replaces an earlier one), with the
        // file each came from.
        let mut user_files: Vec<(String, std::path::PathBuf)> = vec![];
        if let Some(dir) = user_dir {
            let mut paths: Vec<_> = std::fs::read_dir(dir)
                .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            paths.sort();
            for p in paths
                .into_iter()
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            {
                let parsed = std::fs::read_to_string(&p)
                    .map_err(|e| ThemeError::Syntax(e.to_string()))
                    .and_then(|t| ThemeFile::parse(&t));
                match parsed {
                    Ok(t) => {
                        user_files.retain(|(n, _)| *n != t.name);
                        user_files.push((t.name.clone(), p));
                        lib.user.insert(t.name.clone(), t);
                    }
                    Err(e) => problems.push(format!("theme {}: {e}", p.display())),
                }
            }
        }
        let mut themes = vec![];
        for name in &lib.order {
            let Some(file) = lib.bundled.get(name) else {
                continue;
            };
            if lib.user.contains_key(name) {
                continue;
            }
            match lib.theme(file, false) {
                Ok(t) => themes.push(t),
                Err(e) => problems.push(format!("bundled theme {name}: {e}")),
            }
        }
        for (name, path) in &user_files {
            let Some(file) = lib.user.get(name) else {
                continue;
            };
            match lib.theme(file, true) {
                Ok(t) => themes.push(t),
                Err(e) => problems.push(format!("theme {}: {e}", path.display())),
            }
        }
        if themes.is_empty() {
            themes.push(Theme::fallback());
        }
        (themes, problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library with the bundled themes and these user files.
    fn library(user: &[&str]) -> Library {
        let (mut lib, problems) = Library::bundled();
        assert!(problems.is_empty(), "{problems:?}");
        for text in user {
            let f = ThemeFile::parse(text).unwrap();
            lib.user.insert(f.name.clone(), f);
        }
        lib
    }

    fn user_theme(lib: &Library, name: &str) -> Result<Theme, ThemeError> {
        lib.theme(&lib.user[name], true)
    }

    #[test]
    fn palette_names_resolve_and_shadow_colour_names() {
        let t = Theme::from_toml(
            r##"
            name = "p"
            [palette]
            sea = "#102030"
            red = "#ff0001"
            [styles]
            base = { fg = "sea", bg = "red" }
            title = { fg = "red", bold = true }
            error = { fg = "lightred" }
            [drafted]
            depths = ["sea", "blue", "7"]
            "##,
        )
        .unwrap();
        assert_eq!(
            t.style(StyleKey::Base).fg,
            Some(Color::Rgb(0x10, 0x20, 0x30))
        );
        // A palette entry named like a colour wins over the colour name.
        assert_eq!(t.style(StyleKey::Base).bg, Some(Color::Rgb(0xff, 0, 1)));
        assert!(t
            .style(StyleKey::Title)
            .add_modifier
            .contains(Modifier::BOLD));
        // Colour names still work beside a palette.
        assert_eq!(t.style(StyleKey::Error).fg, Some(Color::LightRed));
        assert_eq!(t.drafted(1).fg, Some(Color::Rgb(0x10, 0x20, 0x30)));
        assert_eq!(t.drafted(2).fg, Some(Color::Blue));
        assert_eq!(t.drafted(9).fg, Some(Color::Indexed(7)));
        // A key the file leaves out takes the fallback's style.
        assert_eq!(
            t.style(StyleKey::Target),
            Theme::fallback().style(StyleKey::Target)
        );
    }

    #[test]
    fn bundled_palettes_leave_the_colour_names_free() {
        // An heir of a bundled theme writing `fg = "red"` gets the terminal's red.
        for (file, text) in BUNDLED {
            for name in ThemeFile::parse(text).unwrap().palette.keys() {
                assert!(
                    parse_color(name).is_none(),
                    "{file}: palette entry `{name}`"
                );
            }
        }
    }

    #[test]
    fn unknown_colours_are_errors_that_say_where() {
        let e = Theme::from_toml("name = \"x\"\n[styles]\nbase = { fg = \"sea\" }").unwrap_err();
        assert_eq!(
            e,
            ThemeError::UnknownColour {
                place: "styles.base.fg".into(),
                colour: "sea".into()
            }
        );
        assert!(e
            .to_string()
            .contains("styles.base.fg: unknown colour `sea`"));
        let e = Theme::from_toml("name = \"x\"\n[palette]\nsea = \"#12\"").unwrap_err();
        assert!(e.to_string().starts_with("palette.sea:"), "{e}");
        let e =
            Theme::from_toml("name = \"x\"\n[drafted]\ndepths = [\"red\", \"nope\"]").unwrap_err();
        assert!(e.to_string().starts_with("drafted.depths[1]:"), "{e}");
        let e = Theme::from_toml("name = \"x\"\n[drafted]\ndepths = []").unwrap_err();
        assert_eq!(e, ThemeError::NoDepths);
    }

    #[test]
    fn unknown_style_keys_and_syntax_errors() {
        let e = Theme::from_toml("name = \"x\"\n[styles]\nstatus_mod = {}").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown style `status_mod` (the styles are base, "),
            "{e}"
        );
        let e =
            Theme::from_toml("name = \"x\"\n[styles]\nbase = { colour = \"red\" }").unwrap_err();
        assert!(matches!(e, ThemeError::Syntax(_)), "{e:?}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
        let e = Theme::from_toml("name = \"x\"\n\nthis is = = not toml").unwrap_err();
        assert!(e.to_string().starts_with("line 3:"), "{e}");
    }

    #[test]
    fn inherits_takes_the_parent_and_overrides_what_it_sets() {
        let dark = Theme::from_toml(BUNDLED[0].1).unwrap();
        let t = Theme::from_toml(
            r##"
            name = "darker"
            inherits = "dark"
            [styles]
            status_mode = { fg = "black", bg = "#ff8800" }
            "##,
        )
        .unwrap();
        assert_eq!(t.name, "darker");
        assert_eq!(
            t.style(StyleKey::StatusMode),
            Style::default()
                .fg(Color::Black)
                .bg(Color::Rgb(0xff, 0x88, 0))
        );
        for k in StyleKey::ALL
            .into_iter()
            .filter(|&k| k != StyleKey::StatusMode)
        {
            assert_eq!(t.style(k), dark.style(k), "{k}");
        }
        assert_eq!(t.drafted, dark.drafted);
    }

    #[test]
    fn an_heirs_palette_recolours_the_parents_styles() {
        let lib = library(&[
            r##"
            name = "base"
            [palette]
            accent = "#010101"
            [styles]
            title = { fg = "accent", bold = true }
            key = { fg = "accent" }
            [drafted]
            depths = ["accent", "green"]
            "##,
            r##"
            name = "child"
            inherits = "base"
            [palette]
            accent = "#020202"
            [styles]
            key = { fg = "red" }
            "##,
            r##"
            name = "grandchild"
            inherits = "child"
            [drafted]
            depths = ["blue"]
            "##,
        ]);
        let child = user_theme(&lib, "child").unwrap();
        let accent = Color::Rgb(2, 2, 2);
        assert_eq!(
            child.style(StyleKey::Title),
            Style::default().fg(accent).add_modifier(Modifier::BOLD)
        );
        assert_eq!(child.style(StyleKey::Key).fg, Some(Color::Red));
        assert_eq!(child.drafted(1).fg, Some(accent));
        let grandchild = user_theme(&lib, "grandchild").unwrap();
        assert_eq!(grandchild.style(StyleKey::Title).fg, Some(accent));
        assert_eq!(grandchild.drafted, vec![Color::Blue]);
        assert_eq!(
            user_theme(&lib, "base").unwrap().style(StyleKey::Title).fg,
            Some(Color::Rgb(1, 1, 1))
        );
    }

    #[test]
    fn cycles_and_unknown_parents_are_errors() {
        let lib = library(&[
            "name = \"a\"\ninherits = \"b\"",
            "name = \"b\"\ninherits = \"c\"",
            "name = \"c\"\ninherits = \"a\"",
            "name = \"me\"\ninherits = \"me\"",
            "name = \"orphan\"\ninherits = \"nobody\"",
            "name = \"ok\"\ninherits = \"dark\"",
        ]);
        assert_eq!(
            user_theme(&lib, "a").unwrap_err(),
            ThemeError::Cycle("a → b → c → a".into())
        );
        assert_eq!(
            user_theme(&lib, "me").unwrap_err().to_string(),
            "themes inherit in a cycle: me → me"
        );
        let e = user_theme(&lib, "orphan").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("theme `orphan` inherits `nobody`, which is not a theme"),
            "{e}"
        );
        assert!(e.to_string().contains("dark"), "{e}");
        assert!(user_theme(&lib, "ok").is_ok());
    }

    #[test]
    fn a_user_theme_may_build_on_the_bundled_theme_it_replaces() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("dark.toml"),
            "name = \"dark\"\ninherits = \"dark\"\n[styles]\nerror = { fg = \"red\" }",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("typo.toml"),
            "name = \"typo\"\n[styles]\nborder_focused = { fg = \"red\" }",
        )
        .unwrap();
        let (themes, problems) = Theme::load_all(Some(dir.path()));
        let names: Vec<&str> = themes.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["light", "high-contrast", "dark"]);
        let bundled = Theme::from_toml(BUNDLED[0].1).unwrap();
        let mine = &themes[2];
        assert_eq!(mine.style(StyleKey::Error).fg, Some(Color::Red));
        assert_eq!(mine.style(StyleKey::Base), bundled.style(StyleKey::Base));
        // The broken file is named with the key at fault.
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("typo.toml"), "{problems:?}");
        assert!(
            problems[0].contains("unknown style `border_focused`"),
            "{problems:?}"
        );
    }
}
