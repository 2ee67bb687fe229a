//! The chat UI's slash commands, limits, themes, key overrides and exports, with a scripted
//! engine and no weights.

mod common;

use common::tui::*;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use treespec::chat::scripted::ScriptedEngine;
use treespec::engine::Mode;
use treespec::transcript::Transcript;
use treespec::tui::app::{App, AppOptions};
use treespec::tui::commands::COMMANDS;
use treespec::tui::theme::{StyleKey, Theme, BUNDLED};
use treespec::tui::view;

#[test]
fn slash_commands() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = app_with(vec![answer()], dir.path());
    let run = |app: &mut App, cmd: &str| {
        type_text(app, cmd);
        app.on_key(key(KeyCode::Enter));
    };
    run(&mut app, "/mode linear");
    assert_eq!(app.settings.mode, Mode::Linear);
    run(&mut app, "/mode mtp");
    assert_eq!(app.settings.mode, Mode::Linear);
    assert!(app.notice.as_ref().unwrap().error);
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("multi-token-prediction"));
    run(&mut app, "/budget 16");
    assert_eq!(app.settings.budget, 16);
    run(&mut app, "/depth 6");
    assert_eq!(app.settings.depth, 6);
    run(&mut app, "/gamma 5");
    assert_eq!(app.settings.gamma, 5);
    run(&mut app, "/expand 3");
    assert_eq!(app.settings.expand, 3);
    run(&mut app, "/expand -1");
    assert!(app.notice.as_ref().unwrap().error);
    assert_eq!(app.settings.expand, 3);
    run(&mut app, "/budget lots");
    assert!(app.notice.as_ref().unwrap().error);
    run(&mut app, "/temp 0.7");
    assert!((app.settings.sampling.temperature - 0.7).abs() < 1e-6);
    run(&mut app, "/system Be brief.");
    assert_eq!(app.transcript.system.as_deref(), Some("Be brief."));
    type_text(&mut app, "hello");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    let req = log.lock().unwrap().requests[0].clone();
    assert_eq!(req[0].content, "Be brief.");
    run(&mut app, "/save");
    assert!(app.transcript.path.exists());
    let md = dir.path().join("out.md");
    run(&mut app, &format!("/export md {}", md.display()));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.contains("**You:**") && text.contains("hello") && text.contains("Hello there friend!")
    );
    run(&mut app, "/theme light");
    assert_eq!(app.theme().name, "light");
    run(&mut app, "/theme nope");
    assert!(app.notice.as_ref().unwrap().error);
    run(&mut app, "/help");
    assert!(app.show_help);
    app.on_key(key(KeyCode::Esc));
    run(&mut app, "/frobnicate");
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("unknown command"));
    run(&mut app, "/clear");
    assert!(app.transcript.turns.is_empty());
    run(&mut app, "/quit");
    assert!(app.quit);
}

#[test]
fn theme_cycling_changes_the_colours_on_screen() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    let before = render(&mut app, 120, 30);
    let (x, y) = find(&before, "Hello").unwrap();
    app.on_key(key(KeyCode::F(9)));
    let after = render(&mut app, 120, 30);
    assert_eq!(app.theme().name, "light");
    let (x2, y2) = find(&after, "Hello").unwrap();
    assert_eq!((x, y), (x2, y2));
    assert_ne!(before[(x, y)].fg, after[(x, y)].fg);
    assert_eq!(after[(x, y)].fg, app.theme().drafted(1).fg.unwrap());
}

#[test]
fn every_bundled_theme_loads_and_defines_every_key() {
    for (file, text) in BUNDLED {
        let t = Theme::from_toml(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let raw: toml::Value = toml::from_str(text).unwrap();
        let styles = raw["styles"].as_table().unwrap();
        for k in StyleKey::ALL {
            assert!(styles.contains_key(k.name()), "{file} lacks `{k}`");
        }
        assert!(t.drafted_shades() >= 4, "{file}: too few depth shades");
    }
    let err = Theme::from_toml("name = \"x\"\n[styles]\nbogus = { fg = \"red\" }").unwrap_err();
    assert!(err.to_string().contains("unknown style `bogus`"), "{err}");
    // `drafted` is a list of colours, not a style.
    assert!(Theme::from_toml("name = \"x\"\n[styles]\ndrafted = { fg = \"red\" }").is_err());
    assert!(Theme::from_toml("name = \"x\"\n[styles]\nbase = { fg = \"nocolour\" }").is_err());
    // User themes override bundled ones by name; broken files are reported, not fatal.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mine.toml"),
        "name = \"mine\"\n[styles]\nbase = { fg = \"red\" }",
    )
    .unwrap();
    std::fs::write(dir.path().join("broken.toml"), "this is not toml = = =").unwrap();
    let (themes, problems) = Theme::load_all(Some(dir.path()));
    assert!(themes.iter().any(|t| t.name == "mine"));
    assert_eq!(problems.len(), 1, "{problems:?}");
}

#[test]
fn key_overrides_from_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let engine = ScriptedEngine::new(vec![]);
    let t = Transcript::new(dir.path(), "t", None, "cpu");
    let mut keys = std::collections::BTreeMap::new();
    keys.insert("cycle_mode".to_string(), vec!["ctrl+o".to_string()]);
    keys.insert("nonsense".to_string(), vec!["f12".to_string()]);
    let mut app = App::new(
        Box::new(engine),
        t,
        AppOptions {
            keys,
            ..AppOptions::default()
        },
    );
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("unknown action `nonsense`"));
    app.on_key(key(KeyCode::F(2)));
    assert_eq!(app.settings.mode, Mode::Tree, "F2 no longer cycles");
    app.on_key(ctrl('o'));
    assert_eq!(app.settings.mode, Mode::Auto);
    app.on_key(key(KeyCode::F(1)));
    let s = screen(&render(&mut app, 120, 50));
    assert!(s.contains("Ctrl+O"), "the help shows the real binding");
}

#[test]
fn the_help_lists_every_slash_command() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![], dir.path());
    let help: String = view::help_lines(&app)
        .iter()
        .map(|l| l.to_string() + "\n")
        .collect();
    for c in &COMMANDS {
        assert!(
            help.contains(&c.usage()),
            "help lacks {}:\n{help}",
            c.usage()
        );
        // ... and each one runs (no "unknown command").
        app.slash(&format!("/{}", c.name));
        if let Some(n) = &app.notice {
            assert!(
                !n.text.contains("unknown command"),
                "/{}: {}",
                c.name,
                n.text
            );
        }
        app.quit = false;
        app.show_help = false;
    }
}

#[test]
fn tab_completes_slash_command_names() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![], dir.path());
    type_text(&mut app, "/bu");
    app.on_key(key(KeyCode::Tab));
    assert_eq!(app.input.text(), "/budget ");
    type_text(&mut app, "16");
    app.on_key(key(KeyCode::Enter));
    assert_eq!(app.settings.budget, 16);
    // Several candidates: the shared prefix, and the names in the notice line.
    type_text(&mut app, "/e");
    app.on_key(key(KeyCode::Tab));
    assert_eq!(app.input.text(), "/exp");
    let notice = app.notice.clone().unwrap();
    assert_eq!(notice.text, "/expand /export");
    assert!(!notice.error);
    app.on_key(ctrl('u'));
    type_text(&mut app, "/zz");
    app.on_key(key(KeyCode::Tab));
    assert_eq!(app.input.text(), "/zz");
    assert!(app.notice.as_ref().unwrap().error);
    // Elsewhere Tab still indents.
    app.on_key(ctrl('u'));
    type_text(&mut app, "x");
    app.on_key(key(KeyCode::Tab));
    assert_eq!(app.input.text(), "x    ");
}

#[test]
fn out_of_range_values_show_the_engines_limits_and_change_nothing() {
    use treespec::engine::{MAX_BUDGET, MAX_DEPTH, MAX_EXPAND};
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = app_with(vec![], dir.path());
    let run = |app: &mut App, cmd: &str| {
        app.slash(cmd);
        app.notice.clone().unwrap()
    };
    let before = app.settings;
    for (cmd, value) in [
        ("budget", MAX_BUDGET + 1),
        ("budget", 0),
        ("depth", MAX_DEPTH + 1),
        ("gamma", 0),
        ("expand", MAX_EXPAND + 1),
    ] {
        let n = run(&mut app, &format!("/{cmd} {value}"));
        let mut s = before;
        match cmd {
            "budget" => s.budget = value,
            "depth" => s.depth = value,
            "gamma" => s.gamma = value,
            _ => s.expand = value,
        }
        let msg = match s.validate() {
            Err(treespec::Error::Config(m)) => m,
            other => panic!("/{cmd} {value}: {other:?}"),
        };
        assert!(n.error, "/{cmd} {value}");
        assert_eq!(n.text, msg);
        assert!(msg.starts_with(cmd), "{msg}");
        assert_eq!(app.settings, before, "/{cmd} {value} changed nothing");
    }
    let n = run(&mut app, "/temp -1");
    assert!(
        n.error && n.text.starts_with("temperature must be"),
        "{n:?}"
    );
    let n = run(&mut app, "/depth deep");
    assert!(n.error && n.text.starts_with("usage: /depth N"), "{n:?}");
    assert_eq!(app.settings, before);
    assert!(
        log.lock().unwrap().applied.is_empty(),
        "nothing reached the engine"
    );
    // The largest values are accepted.
    run(&mut app, &format!("/budget {MAX_BUDGET}"));
    run(&mut app, &format!("/depth {MAX_DEPTH}"));
    run(&mut app, &format!("/expand {MAX_EXPAND}"));
    assert_eq!(
        (app.settings.budget, app.settings.depth, app.settings.expand),
        (MAX_BUDGET, MAX_DEPTH, MAX_EXPAND)
    );
    // Keys step within the limits: up at the top and down at the bottom change nothing.
    app.on_key(key(KeyCode::F(4)));
    assert_eq!(app.settings.budget, MAX_BUDGET);
    app.on_key(KeyEvent::new(KeyCode::Char('.'), KeyModifiers::ALT));
    assert_eq!(app.settings.depth, MAX_DEPTH);
    assert!(!app.notice.as_ref().unwrap().error);
    app.slash("/depth 1");
    app.slash("/budget 1");
    app.on_key(KeyEvent::new(KeyCode::Char(','), KeyModifiers::ALT));
    app.on_key(key(KeyCode::F(3)));
    assert_eq!((app.settings.budget, app.settings.depth), (1, 1));
    app.slash("/mode linear");
    app.slash("/gamma 1");
    app.on_key(key(KeyCode::F(3)));
    assert_eq!(app.settings.gamma, 1);
    app.slash(&format!("/gamma {MAX_DEPTH}"));
    app.on_key(key(KeyCode::F(4)));
    assert_eq!(app.settings.gamma, MAX_DEPTH);
    assert!(app.settings.validate().is_ok());
}

#[test]
fn the_status_bar_shape_is_the_engines() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![], dir.path());
    app.slash("/expand 4");
    let status = |app: &App| -> String {
        view::status_spans(app)
            .iter()
            .map(|s| s.content.to_string())
            .collect()
    };
    assert!(status(&app).contains(&format!("│ {} │", app.settings.shape())));
    assert!(status(&app).contains("W4"));
    app.slash("/mode linear");
    assert!(status(&app).contains(&format!("│ {} │", app.settings.shape())));
    app.slash("/mode ar");
    assert_eq!(app.settings.shape(), "");
    assert!(status(&app).contains("│ — │"), "{}", status(&app));
}

#[test]
fn export_right_after_esc_includes_the_answer_on_screen() {
    // Issue 9 §5: Esc during an answer, then /export md before the engine reports that the
    // answer finished (its current step still running on a slow CPU), wrote a file without the
    // answer that was on screen.
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    app.poll_engine(); // Started and the first step: "Hello there friend"
    let on_screen = screen(&render(&mut app, 120, 30));
    assert!(on_screen.contains("Hello there friend"), "{on_screen}");
    app.on_key(key(KeyCode::Esc));
    assert!(
        app.generating(),
        "the Finished event has not been taken in yet"
    );
    let md = dir.path().join("stopped.md");
    app.slash(&format!("/export md {}", md.display()));
    assert!(!app.notice.as_ref().unwrap().error, "{:?}", app.notice);
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("**You:**\n\nhi"), "{text}");
    assert!(
        text.contains("**Assistant:**\n\nHello there friend"),
        "{text}"
    );
    assert!(text.contains("_(stopped:"), "marked as stopped: {text}");
    // The answer is then committed as usual, with the counts of what was shown.
    finish(&mut app);
    assert_eq!(app.transcript.turns.len(), 1);
    let turn = &app.transcript.turns[0];
    assert_eq!(turn.answer(), "Hello there friend");
    assert_eq!((turn.stats.tokens, turn.stats.steps), (3, 1));
    // Exported again, it is an ordinary turn.
    app.slash(&format!("/export md {}", md.display()));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("Hello there friend"), "{text}");
    assert!(!text.contains("_(stopped:"), "{text}");
}

#[test]
fn export_during_an_answer_includes_it_as_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    app.poll_engine();
    app.slash("/export md");
    let md = app.transcript.path.with_extension("md");
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("Hello there friend"), "{text}");
    assert!(text.contains("_(in progress:"), "{text}");
    finish(&mut app);
    assert_eq!(app.transcript.turns[0].answer(), "Hello there friend!\n");
}

/// `/forget` leaves the oldest turns out of the next prompt (the screen keeps them, marked),
/// and the status bar shows how full the context was after the last answer.
#[test]
fn forget_drops_the_oldest_turns_from_the_prompt_and_the_meter_shows_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = app_with(vec![answer(), answer(), answer()], dir.path());
    let send = |app: &mut App, text: &str| {
        type_text(app, text);
        app.on_key(key(KeyCode::Enter));
        finish(app);
    };
    send(&mut app, "first");
    send(&mut app, "second");
    // The prompt (the scripted engine counts its characters as tokens) and the 5 tokens answered.
    assert_eq!(app.context_used(), app.stats.prompt_tokens + 5);
    let buf = render(&mut app, 200, 30);
    assert!(find(&buf, "ctx 1%").is_some(), "the context meter");
    type_text(&mut app, "/forget");
    app.on_key(key(KeyCode::Enter));
    assert_eq!(app.forgotten, 1);
    assert!(app.notice.as_ref().unwrap().text.contains("(1 in it)"));
    send(&mut app, "third");
    let requests = log.lock().unwrap().requests.clone();
    let users: Vec<&str> = requests[2]
        .iter()
        .filter(|m| m.role == treespec::model::chat_template::Role::User)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(
        users,
        ["second", "third"],
        "the first turn is out of the prompt"
    );
    let buf = render(&mut app, 100, 40);
    assert!(
        find(&buf, "first").is_some(),
        "forgotten turns stay on screen"
    );
    assert!(find(&buf, "the turn above is out of the model's context").is_some());
    // More than there are: all of them, then nothing more; a bad count is one clear line.
    type_text(&mut app, "/forget 10");
    app.on_key(key(KeyCode::Enter));
    assert_eq!(app.forgotten, 3);
    type_text(&mut app, "/forget x");
    app.on_key(key(KeyCode::Enter));
    assert!(app.notice.as_ref().unwrap().error);
    // A new chat starts with everything in context again.
    app.on_key(ctrl('n'));
    assert_eq!(app.forgotten, 0);
}

/// `/copy` hands the last answer (or its last code block) to the terminal loop for OSC 52.
#[test]
fn copy_takes_the_last_answer_or_its_code_block() {
    let dir = tempfile::tempdir().unwrap();
    let code = treespec::chat::scripted::ScriptedAnswer::from_steps(
        Mode::Ar,
        &[
            (&[], "Use:\n```sh\n"),
            (&[], "ls -la\n"),
            (&[], "```\nDone."),
        ],
    );
    let (mut app, _) = app_with(vec![code], dir.path());
    let run = |app: &mut App, cmd: &str| {
        type_text(app, cmd);
        app.on_key(key(KeyCode::Enter));
    };
    run(&mut app, "/copy");
    assert!(app.notice.as_ref().unwrap().error, "nothing to copy yet");
    assert_eq!(app.clipboard, None);
    run(&mut app, "list files");
    finish(&mut app);
    run(&mut app, "/copy");
    assert_eq!(
        app.clipboard.take().unwrap(),
        "Use:\n```sh\nls -la\n```\nDone."
    );
    run(&mut app, "/copy code");
    assert_eq!(app.clipboard.take().unwrap(), "ls -la");
    run(&mut app, "/copy all");
    assert!(app.notice.as_ref().unwrap().error);
}
