//! The slash commands: one table, from which the parser ([`parse`]), the help popup's list
//! ([`help_rows`]), the "unknown command" message and Tab completion ([`complete`]) are built.

/// What a command does (the app runs it; see `App::slash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    /// Switch the decoding mode.
    Mode,
    /// Set the tree budget.
    Budget,
    /// Set the tree depth.
    Depth,
    /// Set the chain length of `linear`.
    Gamma,
    /// Set the grown-tree width.
    Expand,
    /// Set the temperature.
    Temperature,
    /// A thinking model reasons before it answers.
    Think,
    /// A thinking model answers at once.
    NoThink,
    /// Set or clear the system prompt.
    System,
    /// Save the transcript.
    Save,
    /// Export the chat.
    Export,
    /// Start a new chat.
    Clear,
    /// Leave the oldest turns out of the model's context.
    Forget,
    /// Copy the last answer (or its last code block) to the clipboard.
    Copy,
    /// Switch or list themes.
    Theme,
    /// Show the help.
    Help,
    /// Quit.
    Quit,
}

/// One slash command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// Its name, without the slash.
    pub name: &'static str,
    /// Other names it answers to.
    pub aliases: &'static [&'static str],
    /// Its argument syntax (`N`, `[PATH]`, `ar|linear|tree|mtp`), empty when it takes none.
    pub args: &'static str,
    /// What it does, briefly.
    pub about: &'static str,
    /// Commands of one group share a line in the help.
    pub group: u8,
    /// What it does, for the app.
    pub kind: CommandKind,
}

impl Command {
    /// `/name ARGS`.
    pub fn usage(&self) -> String {
        if self.args.is_empty() {
            format!("/{}", self.name)
        } else {
            format!("/{} {}", self.name, self.args)
        }
    }

    /// Does `name` (without the slash, any case) name this command?
    pub fn answers_to(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        self.name == name || self.aliases.contains(&name.as_str())
    }
}

/// Every slash command, in help order.
pub const COMMANDS: [Command; 17] = [
    Command {
        name: "mode",
        aliases: &[],
        args: "ar|linear|tree|mtp",
        about: "decoding mode",
        group: 0,
        kind: CommandKind::Mode,
    },
    Command {
        name: "budget",
        aliases: &[],
        args: "N",
        about: "tree budget",
        group: 1,
        kind: CommandKind::Budget,
    },
    Command {
        name: "depth",
        aliases: &[],
        args: "N",
        about: "depth",
        group: 1,
        kind: CommandKind::Depth,
    },
    Command {
        name: "gamma",
        aliases: &[],
        args: "N",
        about: "chain length",
        group: 1,
        kind: CommandKind::Gamma,
    },
    Command {
        name: "expand",
        aliases: &[],
        args: "W",
        about: "grown-tree width",
        group: 1,
        kind: CommandKind::Expand,
    },
    Command {
        name: "temp",
        aliases: &["temperature"],
        args: "T",
        about: "temperature (0: greedy)",
        group: 2,
        kind: CommandKind::Temperature,
    },
    Command {
        name: "think",
        aliases: &[],
        args: "",
        about: "a thinking model reasons first",
        group: 2,
        kind: CommandKind::Think,
    },
    Command {
        name: "no_think",
        aliases: &["nothink"],
        args: "",
        about: "it answers at once",
        group: 2,
        kind: CommandKind::NoThink,
    },
    Command {
        name: "system",
        aliases: &[],
        args: "TEXT",
        about: "system prompt (empty clears it)",
        group: 3,
        kind: CommandKind::System,
    },
    Command {
        name: "save",
        aliases: &[],
        args: "[PATH]",
        about: "save the transcript",
        group: 4,
        kind: CommandKind::Save,
    },
    Command {
        name: "copy",
        aliases: &[],
        args: "[code]",
        about: "copy the last answer (or its code)",
        group: 4,
        kind: CommandKind::Copy,
    },
    Command {
        name: "export",
        aliases: &[],
        args: "md [PATH]",
        about: "export Markdown",
        group: 4,
        kind: CommandKind::Export,
    },
    Command {
        name: "clear",
        aliases: &["new"],
        args: "",
        about: "new chat",
        group: 5,
        kind: CommandKind::Clear,
    },
    Command {
        name: "forget",
        aliases: &[],
        args: "[N]",
        about: "leave the N oldest turns out of the context",
        group: 5,
        kind: CommandKind::Forget,
    },
    Command {
        name: "theme",
        aliases: &[],
        args: "[NAME]",
        about: "theme",
        group: 5,
        kind: CommandKind::Theme,
    },
    Command {
        name: "help",
        aliases: &[],
        args: "",
        about: "help",
        group: 5,
        kind: CommandKind::Help,
    },
    Command {
        name: "quit",
        aliases: &["exit"],
        args: "",
        about: "quit",
        group: 5,
        kind: CommandKind::Quit,
    },
];

/// The command `name` (without the slash, any case; aliases too).
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.answers_to(name))
}

/// Split a command line into the command and its argument (trimmed). The error is the message
/// for an unknown command, listing the commands there are.
pub fn parse(line: &str) -> Result<(&'static Command, &str), String> {
    let line = line.trim();
    let mut parts = line
        .strip_prefix('/')
        .unwrap_or(line)
        .splitn(2, char::is_whitespace);
    let name = parts.next().unwrap_or("");
    let arg = parts.next().unwrap_or("").trim();
    match find(name) {
        Some(c) => Ok((c, arg)),
        None => {
            let all: Vec<String> = COMMANDS.iter().map(|c| format!("/{}", c.name)).collect();
            Err(format!("unknown command /{name} (try {})", all.join(" ")))
        }
    }
}

/// The help's rows: (usages, what they do), one row per group of commands.
pub fn help_rows() -> Vec<(String, String)> {
    let mut rows: Vec<(u8, Vec<String>, Vec<&str>)> = vec![];
    for c in &COMMANDS {
        match rows.last_mut() {
            Some((g, usages, abouts)) if *g == c.group => {
                usages.push(c.usage());
                abouts.push(c.about);
            }
            _ => rows.push((c.group, vec![c.usage()], vec![c.about])),
        }
    }
    rows.into_iter()
        .map(|(_, usages, abouts)| (usages.join("  "), abouts.join(", ")))
        .collect()
}

/// What Tab does to a command name being typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// One command starts so: its name, a slash before and a space after (`/budget `).
    Unique(String),
    /// Several do: the longest prefix they share (with the slash) and their names.
    Several {
        /// The shared prefix, `/s` for `/save` and `/system`.
        common: String,
        /// The candidates, with slashes.
        names: Vec<String>,
    },
    /// None does.
    NoMatch,
}

/// Complete the command name in `input` (`/bu`); `None` when `input` is not a command name
/// alone (no slash first, or an argument begun).
pub fn complete(input: &str) -> Option<Completion> {
    let prefix = input.strip_prefix('/')?;
    if prefix.chars().any(char::is_whitespace) {
        return None;
    }
    let prefix = prefix.to_ascii_lowercase();
    let names: Vec<&str> = COMMANDS
        .iter()
        .map(|c| c.name)
        .filter(|n| n.starts_with(&prefix))
        .collect();
    Some(match names.as_slice() {
        [] => Completion::NoMatch,
        [one] => Completion::Unique(format!("/{one} ")),
        [first, rest @ ..] => {
            let mut common = first.to_string();
            for n in rest {
                let shared = common
                    .chars()
                    .zip(n.chars())
                    .take_while(|(a, b)| a == b)
                    .count();
                common.truncate(shared);
            }
            Completion::Several {
                common: format!("/{common}"),
                names: names.iter().map(|n| format!("/{n}")).collect(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_parses_by_name_and_alias() {
        for c in &COMMANDS {
            let line = format!("/{} {}", c.name, c.args);
            let (found, arg) = parse(&line).unwrap();
            assert_eq!(found.kind, c.kind, "/{}", c.name);
            assert_eq!(arg, c.args);
            assert_eq!(parse(&format!("/{}", c.name.to_uppercase())).unwrap().0, c);
            for a in c.aliases {
                assert_eq!(parse(&format!("/{a}")).unwrap().0.kind, c.kind, "/{a}");
            }
        }
        let names: std::collections::HashSet<&str> = COMMANDS
            .iter()
            .flat_map(|c| std::iter::once(c.name).chain(c.aliases.iter().copied()))
            .collect();
        assert_eq!(
            names.len(),
            COMMANDS.iter().map(|c| 1 + c.aliases.len()).sum::<usize>(),
            "names and aliases are distinct"
        );
    }

    #[test]
    fn arguments_are_trimmed_and_unknown_commands_listed() {
        let (c, arg) = parse("  /system   Be brief.  ").unwrap();
        assert_eq!((c.kind, arg), (CommandKind::System, "Be brief."));
        let e = parse("/frobnicate now").unwrap_err();
        assert!(
            e.starts_with("unknown command /frobnicate (try /mode /budget"),
            "{e}"
        );
        for c in &COMMANDS {
            assert!(e.contains(&format!("/{}", c.name)), "{e}");
        }
    }

    #[test]
    fn help_rows_list_every_entry_once() {
        let rows = help_rows();
        let text: String = rows.iter().map(|(u, _)| format!("{u}  ")).collect();
        for c in &COMMANDS {
            assert_eq!(
                text.matches(&format!("{}  ", c.usage())).count(),
                1,
                "{}",
                c.name
            );
        }
        assert_eq!(rows[1].0, "/budget N  /depth N  /gamma N  /expand W");
    }

    #[test]
    fn completion() {
        assert_eq!(complete("/bu"), Some(Completion::Unique("/budget ".into())));
        assert_eq!(complete("/BU"), Some(Completion::Unique("/budget ".into())));
        assert_eq!(complete("/quit"), Some(Completion::Unique("/quit ".into())));
        assert_eq!(
            complete("/s"),
            Some(Completion::Several {
                common: "/s".into(),
                names: vec!["/system".into(), "/save".into()],
            })
        );
        assert_eq!(
            complete("/t"),
            Some(Completion::Several {
                common: "/t".into(),
                names: vec!["/temp".into(), "/think".into(), "/theme".into()],
            })
        );
        assert_eq!(
            complete("/"),
            Some(Completion::Several {
                common: "/".into(),
                names: COMMANDS.iter().map(|c| format!("/{}", c.name)).collect(),
            })
        );
        assert_eq!(
            complete("/e"),
            Some(Completion::Several {
                common: "/exp".into(),
                names: vec!["/expand".into(), "/export".into()],
            })
        );
        assert_eq!(complete("/zz"), Some(Completion::NoMatch));
        assert_eq!(complete("/budget 8"), None);
        assert_eq!(complete("hello"), None);
    }
}
