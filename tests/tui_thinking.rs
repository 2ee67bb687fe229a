//! A thinking model in the chat UI, with a scripted engine: the reasoning folded into one line
//! (unfolded in its own style by a key), left out of the next turn's history, and `/think` /
//! `/no_think` reaching the engine (refused for a model that does not think).

mod common;

use common::tui::*;
use crossterm::event::KeyCode;
use treespec::chat::scripted::{ScriptedAnswer, ScriptedEngine};
use treespec::engine::Mode;
use treespec::model::chat_template::Role;
use treespec::transcript::Transcript;
use treespec::tui::app::{App, AppOptions};
use treespec::tui::theme::StyleKey;

/// Two steps of reasoning (four tokens), then the answer.
fn thought() -> ScriptedAnswer {
    ScriptedAnswer::from_steps(
        Mode::Tree,
        &[
            (&["Let", " me"], " see"),
            (&[], " carefully"),
            (&["The", " answer"], " is 4."),
        ],
    )
    .reasoning_first(2)
}

fn thinking_app(
    dir: &std::path::Path,
) -> (
    App,
    std::sync::Arc<std::sync::Mutex<treespec::chat::scripted::ScriptLog>>,
) {
    let engine = ScriptedEngine::new(vec![thought()]).thinking();
    let log = engine.log();
    let t = Transcript::new(dir, "scripted-target", None, "cpu");
    (App::new(Box::new(engine), t, AppOptions::default()), log)
}

#[test]
fn reasoning_is_folded_unfolded_by_a_key_and_left_out_of_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = thinking_app(dir.path());
    type_text(&mut app, "2+2?");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    let buf = render(&mut app, 100, 30);
    let theme = app.theme().clone();
    // Folded: one line saying how long it thought, none of its words; the answer in full.
    let (x, y) = find(&buf, "▸ reasoning 4 tokens").expect("folded reasoning line");
    assert_eq!(buf[(x, y)].fg, theme.style(StyleKey::Reasoning).fg.unwrap());
    assert!(
        find(&buf, "carefully").is_none(),
        "folded reasoning is not shown"
    );
    assert!(find(&buf, "The answer is 4.").is_some());
    // Unfolded: the reasoning's words in the reasoning style, above the answer.
    app.on_key(key(KeyCode::F(10)));
    assert!(app.show_reasoning);
    let buf = render(&mut app, 100, 30);
    let (x, y) = find(&buf, "Let me see carefully").expect("unfolded reasoning");
    assert_eq!(buf[(x, y)].fg, theme.style(StyleKey::Reasoning).fg.unwrap());
    let (_, answer_y) = find(&buf, "The answer").unwrap();
    assert!(answer_y > y);
    // The next turn's history holds the answer only.
    type_text(&mut app, "and 3+3?");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    let requests = log.lock().unwrap().requests.clone();
    let second = &requests[1];
    let answer = second.iter().find(|m| m.role == Role::Assistant).unwrap();
    assert_eq!(answer.content, "The answer is 4.");
    // The transcript keeps the reasoning (marked), so a resumed chat shows it folded again.
    let saved = Transcript::load(&app.transcript.path).unwrap().transcript;
    assert_eq!(saved.turns[0].reasoning_tokens(), 4);
    assert_eq!(saved.turns[0].answer(), "The answer is 4.");
    // The Markdown export folds it the same way.
    let md = app.markdown();
    let folded = "<details><summary>reasoning (4 tokens)</summary>\n\nLet me see carefully";
    assert!(md.contains(folded), "{md}");
    assert!(md.contains("</details>\n\nThe answer is 4."), "{md}");
}

#[test]
fn think_commands_reach_a_thinking_model_and_are_refused_by_others() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = thinking_app(dir.path());
    for cmd in ["/no_think", "/think"] {
        type_text(&mut app, cmd);
        app.on_key(key(KeyCode::Enter));
    }
    assert_eq!(log.lock().unwrap().thinking, [Some(false), Some(true)]);
    assert!(app
        .notice
        .as_ref()
        .is_some_and(|n| !n.error && n.text.contains("thinking on")));

    let (mut plain, log) = app_with(vec![], dir.path());
    type_text(&mut plain, "/think");
    plain.on_key(key(KeyCode::Enter));
    assert!(log.lock().unwrap().thinking.is_empty());
    let notice = plain.notice.clone().expect("a refusal");
    assert!(
        notice.error && notice.text.contains("does not think"),
        "{}",
        notice.text
    );
}
