//! Helpers of the UI tests: an app over a scripted engine, fake keys, rendering to a buffer.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::Terminal;
use std::sync::{Arc, Mutex};
use treespec::chat::scripted::{ScriptLog, ScriptedAnswer, ScriptedEngine};
use treespec::engine::Mode;
use treespec::transcript::Transcript;
use treespec::tui::app::{App, AppOptions};
use treespec::tui::view;

pub fn answer() -> ScriptedAnswer {
    ScriptedAnswer::from_steps(
        Mode::Tree,
        &[(&["Hello", " there"], " friend"), (&["!"], "\n")],
    )
}

pub fn app_with(
    answers: Vec<ScriptedAnswer>,
    dir: &std::path::Path,
) -> (App, Arc<Mutex<ScriptLog>>) {
    let engine = ScriptedEngine::new(answers);
    let log = engine.log();
    let t = Transcript::new(dir, "scripted-target", Some("scripted-drafter"), "cpu");
    let app = App::new(Box::new(engine), t, AppOptions::default());
    (app, log)
}

pub fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

pub fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

pub fn type_text(app: &mut App, s: &str) {
    for c in s.chars() {
        app.on_key(key(KeyCode::Char(c)));
    }
}

pub fn finish(app: &mut App) {
    for _ in 0..100 {
        app.poll_engine();
        if !app.generating() {
            return;
        }
    }
    panic!("the scripted answer did not finish");
}

pub fn render(app: &mut App, w: u16, h: u16) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view::draw(f, app)).unwrap();
    term.backend().buffer().clone()
}

/// Position of the first cell where `text` starts on screen.
pub fn find(buf: &Buffer, text: &str) -> Option<(u16, u16)> {
    find_in(buf, text, 0..buf.area.width, 0..buf.area.height)
}

/// The same, within columns `xs` and rows `ys`.
pub fn find_in(
    buf: &Buffer,
    text: &str,
    xs: std::ops::Range<u16>,
    ys: std::ops::Range<u16>,
) -> Option<(u16, u16)> {
    for y in ys {
        let row: String = xs
            .clone()
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect();
        if let Some(i) = row.find(text) {
            return Some((xs.start + row[..i].chars().count() as u16, y));
        }
    }
    None
}

pub fn screen(buf: &Buffer) -> String {
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}
