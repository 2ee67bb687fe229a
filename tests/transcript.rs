//! Transcripts: save, load and resume round-trip; a file cut short by a killed process keeps its
//! complete turns.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use treespec::chat::scripted::{ScriptedAnswer, ScriptedEngine};
use treespec::chat::Origin;
use treespec::engine::{Mode, StopReason};
use treespec::model::chat_template::Role;
use treespec::transcript::{latest, Transcript};
use treespec::tui::app::{App, AppOptions};

fn chat(dir: &std::path::Path, messages: &[&str]) -> Transcript {
    let answers = messages
        .iter()
        .map(|m| {
            ScriptedAnswer::from_steps(Mode::Tree, &[(&["Re", ":"], " "), (&[], m), (&["."], "\n")])
        })
        .collect();
    let engine = ScriptedEngine::new(answers);
    let t = Transcript::new(dir, "scripted-target", Some("scripted-drafter"), "cpu");
    let mut app = App::new(Box::new(engine), t, AppOptions::default());
    app.slash("/system You are terse.");
    for m in messages {
        for c in m.chars() {
            app.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        }
        app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        while app.generating() {
            app.poll_engine();
        }
    }
    app.transcript.clone()
}

#[test]
fn each_turn_is_saved_and_loads_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let t = chat(dir.path(), &["alpha", "beta"]);
    assert_eq!(t.turns.len(), 2);
    let loaded = Transcript::load(&t.path).unwrap();
    assert!(loaded.dropped.is_none());
    assert_eq!(loaded.transcript, t);
    // Per-token origins and per-step records survive.
    let turn = &loaded.transcript.turns[0];
    assert_eq!(turn.answer(), "Re: alpha.\n");
    assert_eq!(turn.tokens[0].origin, Origin::Drafted { depth: 1 });
    assert_eq!(turn.tokens[2].origin, Origin::Target);
    assert_eq!(turn.steps.len(), 3);
    assert_eq!(turn.steps[0].mode, Mode::Tree);
    assert_eq!(turn.stop, Some(StopReason::StopToken));
    assert!(!dir.path().read_dir().unwrap().any(|e| e
        .unwrap()
        .path()
        .to_string_lossy()
        .ends_with(".tmp")));
    assert_eq!(latest(dir.path()), Some(t.path.clone()));
}

#[test]
fn resume_continues_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let t = chat(dir.path(), &["alpha"]);
    let loaded = Transcript::load(&t.path).unwrap().transcript;
    let engine = ScriptedEngine::new(vec![]);
    let log = engine.log();
    let mut app = App::new(Box::new(engine), loaded, AppOptions::default());
    for c in "gamma".chars() {
        app.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
    app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    while app.generating() {
        app.poll_engine();
    }
    // The engine saw the whole conversation: system, the resumed turn, the new message.
    let req = log.lock().unwrap().requests[0].clone();
    let roles: Vec<Role> = req.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![Role::System, Role::User, Role::Assistant, Role::User]
    );
    assert_eq!(req[2].content, "Re: alpha.\n");
    // And the same file now holds both turns.
    let again = Transcript::load(&t.path).unwrap().transcript;
    assert_eq!(again.turns.len(), 2);
    assert_eq!(again.system.as_deref(), Some("You are terse."));
}

#[test]
fn a_half_written_file_keeps_its_complete_turns() {
    let dir = tempfile::tempdir().unwrap();
    let t = chat(dir.path(), &["alpha", "beta", "gamma"]);
    let text = std::fs::read_to_string(&t.path).unwrap();
    // Kill the writer in the middle of the last turn's line.
    let cut = text.trim_end().len() - 40;
    let path = dir.path().join("killed.jsonl");
    std::fs::write(&path, &text[..cut]).unwrap();
    let loaded = Transcript::load(&path).unwrap();
    assert_eq!(loaded.transcript.turns.len(), 2);
    assert!(loaded.dropped.unwrap().contains("incomplete"));
    assert_eq!(loaded.transcript.turns[1].user, "beta");
    // Garbage that is not a transcript at all is an error, not an empty chat.
    std::fs::write(&path, "hello\n").unwrap();
    assert!(Transcript::load(&path).is_err());
    assert!(Transcript::load(&dir.path().join("missing.jsonl")).is_err());
}

#[test]
fn markdown_export() {
    let dir = tempfile::tempdir().unwrap();
    let t = chat(dir.path(), &["alpha"]);
    let p = t.export_markdown(None).unwrap();
    let md = std::fs::read_to_string(p).unwrap();
    assert!(md.contains("**System:** You are terse."));
    assert!(md.contains("**You:**\n\nalpha"));
    assert!(md.contains("**Assistant:**\n\nRe: alpha."));
    assert!(md.contains("tokens per target pass"));
}
