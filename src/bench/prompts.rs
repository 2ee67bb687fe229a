//! Benchmark prompt sets: JSON lines with a `prompt` field, from files or the sets bundled with
//! treespec.

use crate::error::{Error, Result};
use std::path::Path;

/// One benchmark prompt.
#[derive(Debug, Clone)]
pub struct BenchPrompt {
    /// Its id in the file.
    pub id: String,
    /// The user message.
    pub text: String,
    /// Its category, where the file gives one (`"category"`: writing, roleplay, ...).
    pub category: Option<String>,
}

/// A prompt file.
#[derive(Debug, Clone)]
pub struct PromptSet {
    /// The file's stem (`humaneval`, `gsm8k`, `chat`, ...).
    pub name: String,
    /// Its prompts, in file order.
    pub prompts: Vec<BenchPrompt>,
}

/// The prompt sets that ship with treespec (`benchmarks/prompts/`), used when `bench` is given
/// no `--prompts`: name and JSON lines.
pub const BUNDLED: [(&str, &str); 4] = [
    (
        "humaneval",
        include_str!("../../benchmarks/prompts/humaneval.jsonl"),
    ),
    (
        "gsm8k",
        include_str!("../../benchmarks/prompts/gsm8k.jsonl"),
    ),
    ("chat", include_str!("../../benchmarks/prompts/chat.jsonl")),
    (
        "heldout",
        include_str!("../../benchmarks/prompts/heldout.jsonl"),
    ),
];

/// The bundled prompt sets, each cut to `limit` prompts.
pub fn bundled_prompts(limit: Option<usize>) -> Result<Vec<PromptSet>> {
    BUNDLED
        .iter()
        .map(|(name, text)| parse_prompts(name, text, limit))
        .collect()
}

/// Read a JSON-lines prompt file (`{"id": ..., "prompt": ...}` per line).
pub fn load_prompts(path: &Path, limit: Option<usize>) -> Result<PromptSet> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    parse_prompts(&name, &text, limit).map_err(|e| match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{}:{m}", path.display())),
        other => other,
    })
}

/// Parse JSON-lines prompts; errors name the line.
fn parse_prompts(name: &str, text: &str, limit: Option<usize>) -> Result<PromptSet> {
    let mut prompts = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| Error::InvalidArgument(format!("{}: {e}", i + 1)))?;
        let prompt = v
            .get("prompt")
            .and_then(|p| p.as_str())
            .ok_or_else(|| Error::InvalidArgument(format!("{}: no \"prompt\" field", i + 1)))?;
        let id = match v.get("id") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => format!("{}", i + 1),
        };
        let category = v
            .get("category")
            .and_then(|c| c.as_str())
            .map(str::to_string);
        prompts.push(BenchPrompt {
            id,
            text: prompt.to_string(),
            category,
        });
        if limit.is_some_and(|l| prompts.len() >= l) {
            break;
        }
    }
    Ok(PromptSet {
        name: name.to_string(),
        prompts,
    })
}

/// Each set whose prompts carry two or more categories split into one set a category
/// (`heldout/writing`, ...; categories in the order they first appear, prompts in file order; a
/// prompt with none goes to `{set}/other`), so that `bench --by-category` reports each apart.
/// Sets of one category or none stay as they are.
pub fn by_category(sets: Vec<PromptSet>) -> Vec<PromptSet> {
    let mut out = vec![];
    for set in sets {
        let first = set.prompts.first().map(|p| &p.category);
        if set.prompts.iter().all(|p| Some(&p.category) == first) {
            out.push(set);
            continue;
        }
        let mut split: Vec<PromptSet> = vec![];
        for p in set.prompts {
            let name = format!("{}/{}", set.name, p.category.as_deref().unwrap_or("other"));
            match split.iter_mut().find(|s| s.name == name) {
                Some(s) => s.prompts.push(p),
                None => split.push(PromptSet {
                    name,
                    prompts: vec![p],
                }),
            }
        }
        out.extend(split);
    }
    out
}

/// At most `n` of `items`, their categories (`category` of each) taking turns: the first item
/// of each category in the order they first appear, then the second of each, ...; in the given
/// order within one. So a prompt set sorted by category (`chat`: four of each in a row) is
/// measured on all of them; one of one category or none: its first `n`.
pub fn balanced_by<T, C: PartialEq>(items: Vec<T>, n: usize, category: impl Fn(&T) -> C) -> Vec<T> {
    let mut groups: Vec<(C, std::collections::VecDeque<T>)> = vec![];
    for item in items {
        let c = category(&item);
        match groups.iter_mut().find(|(g, _)| *g == c) {
            Some((_, g)) => g.push_back(item),
            None => groups.push((c, [item].into())),
        }
    }
    let mut picked = vec![];
    while picked.len() < n && groups.iter().any(|(_, g)| !g.is_empty()) {
        for (_, g) in &mut groups {
            if let Some(item) = g.pop_front().filter(|_| picked.len() < n) {
                picked.push(item);
            }
        }
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_balanced_pick_takes_every_category_in_turn() {
        let sets = bundled_prompts(None).expect("bundled sets parse");
        let pick = |name: &str, n: usize| {
            let set = sets.iter().find(|s| s.name == name).expect("bundled set");
            balanced_by(set.prompts.clone(), n, |p| p.category.clone())
        };
        // The chat set lists its categories four in a row: the first 16 would be four of them.
        let chat = pick("chat", 16);
        let ids: Vec<&str> = chat.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            &ids[..3],
            ["chat-writing-0", "chat-roleplay-0", "chat-reasoning-0"]
        );
        assert_eq!(ids[8], "chat-writing-1");
        let categories: std::collections::BTreeSet<_> =
            chat.iter().map(|p| p.category.clone()).collect();
        assert_eq!((chat.len(), categories.len()), (16, 8));
        // One category: the first n, in file order; fewer prompts than asked: all of them.
        let code = pick("humaneval", 5);
        let first: Vec<&str> = sets[0].prompts[..5].iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            code.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            first
        );
        assert_eq!(pick("chat", 100).len(), 32);
    }

    #[test]
    fn the_held_out_set_splits_into_its_eight_categories() {
        let sets = by_category(bundled_prompts(Some(16)).expect("bundled sets parse"));
        let held: Vec<&PromptSet> = sets
            .iter()
            .filter(|s| s.name.starts_with("heldout/"))
            .collect();
        assert_eq!(
            held.len(),
            8,
            "{:?}",
            held.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        assert!(held.iter().all(|s| s.prompts.len() == 2));
        assert_eq!(held[0].name, "heldout/writing");
        // A set of one category (humaneval's are all "code") is left whole; chat splits too.
        assert!(sets
            .iter()
            .any(|s| s.name == "humaneval" && s.prompts.len() == 16));
        assert!(sets.iter().any(|s| s.name == "chat/writing"));
    }
}
