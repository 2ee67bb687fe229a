//! Transcripts: every completed turn saved as JSON lines (write to a temporary file, then rename,
//! so a crash loses at most the turn in progress), loaded back for `--resume`, exported to
//! Markdown. Per assistant token the file keeps its origin, step and depth; per step the mode,
//! the tree's size and the stage timings.

use crate::chat::{Origin, StepView, TokenPiece};
use crate::engine::{AnswerStats, Mode, StageTimes, StopReason};
use crate::error::{Error, Result};
use crate::model::chat_template::{ChatMessage, Role};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// File format version written in the header.
pub const VERSION: u32 = 1;

/// One step of an answer, as saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 1-based step number.
    pub step: usize,
    /// Mode of the step.
    pub mode: Mode,
    /// Drafted nodes in the verified tree.
    pub drafted: usize,
    /// Drafted tokens accepted.
    pub accepted: usize,
    /// Tokens emitted.
    pub emitted: usize,
    /// Time per stage (written in milliseconds: draft, build, verify, walk, commit).
    #[serde(rename = "times_ms")]
    pub times: StageTimes,
}

impl StepRecord {
    /// The record of a step.
    pub fn from_view(v: &StepView) -> Self {
        StepRecord {
            step: v.step,
            mode: v.mode,
            drafted: v.tree.drafted(),
            accepted: v.accepted(),
            emitted: v.pieces.len(),
            times: v.times,
        }
    }
}

/// One exchange: the user's message and the assistant's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// What the user said.
    pub user: String,
    /// The answer, token by token.
    pub tokens: Vec<TokenPiece>,
    /// The steps that produced it.
    pub steps: Vec<StepRecord>,
    /// Why the answer ended (`None` while in progress).
    pub stop: Option<StopReason>,
    /// Totals.
    #[serde(default)]
    pub stats: AnswerStats,
}

impl Turn {
    /// A turn waiting for its answer.
    pub fn new(user: impl Into<String>) -> Self {
        Turn {
            user: user.into(),
            tokens: vec![],
            steps: vec![],
            stop: None,
            stats: AnswerStats::default(),
        }
    }

    /// The answer's text, without a thinking model's reasoning (which the next turn's prompt
    /// leaves out, as the models' templates do).
    pub fn answer(&self) -> String {
        self.text_where(false)
    }

    /// A thinking model's reasoning in the answer (empty for other answers).
    pub fn reasoning(&self) -> String {
        self.text_where(true)
    }

    /// The text of the answer's reasoning tokens, or of the rest.
    fn text_where(&self, reasoning: bool) -> String {
        self.tokens
            .iter()
            .filter(|t| t.reasoning == reasoning)
            .map(|t| t.text.as_str())
            .collect()
    }

    /// Tokens of a thinking model's reasoning in the answer.
    pub fn reasoning_tokens(&self) -> usize {
        self.tokens.iter().filter(|t| t.reasoning).count()
    }

    /// True once the answer has ended.
    pub fn is_complete(&self) -> bool {
        self.stop.is_some()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Header {
        version: u32,
        created: String,
        target: String,
        drafter: Option<String>,
        device: String,
    },
    System {
        content: Option<String>,
    },
    Turn(Turn),
}

/// A conversation and where it is saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// When the chat began (UTC, ISO 8601).
    pub created: String,
    /// Target model name.
    pub target: String,
    /// Drafter model name.
    pub drafter: Option<String>,
    /// Device.
    pub device: String,
    /// The system prompt in force.
    pub system: Option<String>,
    /// Completed turns.
    pub turns: Vec<Turn>,
    /// The file it is saved to.
    pub path: PathBuf,
}

/// What loading found.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The transcript (complete turns only).
    pub transcript: Transcript,
    /// Set when the file ended in a partial line (a process killed mid-write) or held turns
    /// that never completed; those were dropped.
    pub dropped: Option<String>,
}

impl Transcript {
    /// A new, empty transcript saved under `dir` with a time-stamped name.
    pub fn new(dir: &Path, target: &str, drafter: Option<&str>, device: &str) -> Self {
        let (stamp, iso) = now_stamp();
        let mut path = dir.join(format!("chat-{stamp}.jsonl"));
        let mut n = 1;
        while path.exists() {
            n += 1;
            path = dir.join(format!("chat-{stamp}-{n}.jsonl"));
        }
        Transcript {
            created: iso,
            target: target.to_string(),
            drafter: drafter.map(str::to_string),
            device: device.to_string(),
            system: None,
            turns: vec![],
            path,
        }
    }

    /// The conversation as chat messages (system prompt first, if any).
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.messages_after(0)
    }

    /// [`Transcript::messages`] without the first `skip` turns (left out of the model's context
    /// to make room; the system prompt stays).
    pub fn messages_after(&self, skip: usize) -> Vec<ChatMessage> {
        let mut m = vec![];
        if let Some(s) = &self.system {
            m.push(ChatMessage::new(Role::System, s.clone()));
        }
        for t in self.turns.iter().skip(skip) {
            m.push(ChatMessage::new(Role::User, t.user.clone()));
            if t.is_complete() {
                m.push(ChatMessage::new(Role::Assistant, t.answer()));
            }
        }
        m
    }

    fn to_jsonl(&self) -> Result<String> {
        let enc = |l: &Line| {
            serde_json::to_string(l).map_err(|e| Error::InvalidArgument(format!("transcript: {e}")))
        };
        let mut out = enc(&Line::Header {
            version: VERSION,
            created: self.created.clone(),
            target: self.target.clone(),
            drafter: self.drafter.clone(),
            device: self.device.clone(),
        })?;
        out.push('\n');
        out.push_str(&enc(&Line::System {
            content: self.system.clone(),
        })?);
        out.push('\n');
        for t in self.turns.iter().filter(|t| t.is_complete()) {
            out.push_str(&enc(&Line::Turn(t.clone()))?);
            out.push('\n');
        }
        Ok(out)
    }

    /// Save the complete turns: write a temporary file beside the target, then rename it over.
    pub fn save(&self) -> Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = self.to_jsonl()?;
        let tmp = self.path.with_extension("jsonl.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        Ok(())
    }

    /// Load a transcript. Complete turns are kept; a partial last line or an unfinished turn is
    /// reported in [`Loaded::dropped`].
    pub fn load(path: &Path) -> Result<Loaded> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let bad = |m: String| Error::InvalidArgument(format!("{}: {m}", path.display()));
        let mut t = Transcript {
            created: String::new(),
            target: String::new(),
            drafter: None,
            device: String::new(),
            system: None,
            turns: vec![],
            path: path.to_path_buf(),
        };
        let mut dropped = None;
        let lines: Vec<&str> = text.split('\n').collect();
        let mut saw_header = false;
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let is_last = lines[i + 1..].iter().all(|l| l.trim().is_empty());
            let parsed: Line = match serde_json::from_str(line) {
                Ok(l) => l,
                Err(e) if is_last && saw_header => {
                    dropped = Some(format!(
                        "line {} is incomplete (the writer was interrupted): {e}",
                        i + 1
                    ));
                    break;
                }
                Err(e) => return Err(bad(format!("line {}: {e}", i + 1))),
            };
            match parsed {
                Line::Header {
                    version,
                    created,
                    target,
                    drafter,
                    device,
                } => {
                    if version > VERSION {
                        return Err(bad(format!(
                            "written by a newer treespec (version {version})"
                        )));
                    }
                    saw_header = true;
                    t.created = created;
                    t.target = target;
                    t.drafter = drafter;
                    t.device = device;
                }
                Line::System { content } => t.system = content,
                Line::Turn(turn) => {
                    if turn.is_complete() {
                        t.turns.push(turn);
                    } else {
                        dropped = Some("an unfinished turn".into());
                    }
                }
            }
        }
        if !saw_header {
            return Err(bad("not a treespec transcript (no header line)".into()));
        }
        Ok(Loaded {
            transcript: t,
            dropped,
        })
    }

    /// The conversation as Markdown.
    pub fn to_markdown(&self) -> String {
        let mut s = format!("# Chat, {}\n\n", self.created);
        s.push_str(&format!("Target: {}", self.target));
        if let Some(d) = &self.drafter {
            s.push_str(&format!(", drafter: {d}"));
        }
        s.push_str(&format!(", device: {}\n\n", self.device));
        if let Some(sys) = &self.system {
            s.push_str(&format!("**System:** {sys}\n\n"));
        }
        for t in &self.turns {
            s.push_str(&format!("**You:**\n\n{}\n\n**Assistant:**\n\n", t.user));
            if t.reasoning_tokens() > 0 {
                // Folded, as the chat shows it (GitHub and most viewers render <details>).
                s.push_str(&format!(
                    "<details><summary>reasoning ({} tokens)</summary>\n\n{}\n\n</details>\n\n",
                    t.reasoning_tokens(),
                    t.reasoning().trim()
                ));
            }
            s.push_str(&format!("{}\n\n", t.answer()));
            if t.stats.steps > 0 {
                let drafted = t
                    .tokens
                    .iter()
                    .filter(|p| matches!(p.origin, Origin::Drafted { .. }))
                    .count();
                s.push_str(&format!(
                    "_{} tokens, {:.1} tok/s, {:.2} tokens per target pass, {} from accepted drafts_\n\n",
                    t.stats.tokens,
                    t.stats.tokens_per_sec(),
                    t.stats.tau(),
                    drafted
                ));
            }
        }
        s
    }

    /// Write the Markdown export next to the transcript (or to `path`); returns where.
    pub fn export_markdown(&self, path: Option<&Path>) -> Result<PathBuf> {
        let out = path
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.path.with_extension("md"));
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&out, self.to_markdown())?;
        Ok(out)
    }
}

/// The most recent transcript in `dir`, if any.
pub fn latest(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    files.sort();
    files.pop().map(|(_, p)| p)
}

/// The directory transcripts are saved in.
pub fn default_dir() -> PathBuf {
    crate::paths::data_dir().join("transcripts")
}

/// (`YYYYMMDD-HHMMSS`, ISO 8601) for now, UTC.
fn now_stamp() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}{mo:02}{d:02}-{h:02}{m:02}{s:02}"),
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z"),
    )
}
