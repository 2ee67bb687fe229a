//! The real binary in tmux with the small real model: type a prompt, see the answer and a status
//! line with tau, switch mode, quit, find the transcript. (`.ci/run` installs tmux.)

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("run tmux");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn screen(s: &Session) -> String {
    tmux(&["capture-pane", "-p", "-t", &s.0])
}

fn wait_for(s: &Session, what: &str, pred: impl Fn(&str) -> bool, secs: u64) -> String {
    let t0 = Instant::now();
    loop {
        let text = screen(s);
        if pred(&text) {
            return text;
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            panic!("timed out waiting for {what}; screen:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[test]
fn chat_in_tmux_with_the_real_model() {
    if Command::new("tmux").arg("-V").output().is_err() {
        if std::env::var_os("TREESPEC_REQUIRE_MODELS").is_some() {
            panic!("tmux is not installed (CI installs it)");
        }
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("config");
    let bin = Path::new(env!("CARGO_BIN_EXE_treespec"));
    let cmd = format!(
        "env TREESPEC_DATA={} TREESPEC_CONFIG={} {} chat --target {m} --drafter {m} --max-tokens 40; echo EXITED $?; sleep 60",
        shell_quote(&data),
        shell_quote(&config),
        shell_quote(bin),
        m = shell_quote(&model),
    );
    let s = Session(format!("treespec-e2e-{}", std::process::id()));
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &s.0,
        "-x",
        "150",
        "-y",
        "40",
        &cmd,
    ]);
    wait_for(
        &s,
        "the chat to open",
        |t| t.contains("message, or /help"),
        240,
    );
    tmux(&[
        "send-keys",
        "-t",
        &s.0,
        "-l",
        "What is the capital of France?",
    ]);
    tmux(&["send-keys", "-t", &s.0, "Enter"]);
    let text = wait_for(
        &s,
        "the answer",
        |t| t.contains("tokens ·") && t.contains("τ "),
        300,
    );
    assert!(text.contains("Assistant"), "{text}");
    assert!(text.contains("draft tree · step"), "{text}");
    let status = text
        .lines()
        .find(|l| l.contains(" tree ") && l.contains("tok/s"))
        .unwrap_or_else(|| panic!("no status line:\n{text}"));
    assert!(status.contains("τ "), "{status}");
    // Switch mode: tree -> auto (mtp, between them, is unavailable).
    tmux(&["send-keys", "-t", &s.0, "F2"]);
    wait_for(&s, "the mode switch", |t| t.contains("mode auto"), 30);
    // Quit: Ctrl+C twice while idle.
    tmux(&["send-keys", "-t", &s.0, "C-c"]);
    wait_for(&s, "the quit prompt", |t| t.contains("again to quit"), 30);
    tmux(&["send-keys", "-t", &s.0, "C-c"]);
    let text = wait_for(&s, "exit", |t| t.contains("EXITED"), 60);
    assert!(text.contains("EXITED 0"), "{text}");
    assert!(text.contains("chat saved to"), "{text}");
    // The transcript holds the turn.
    let dir = data.join("transcripts");
    let file = treespec::transcript::latest(&dir).expect("a transcript file");
    let t = treespec::transcript::Transcript::load(&file)
        .unwrap()
        .transcript;
    assert_eq!(t.turns.len(), 1);
    assert_eq!(t.turns[0].user, "What is the capital of France?");
    assert!(!t.turns[0].answer().trim().is_empty());
}
