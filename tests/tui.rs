//! The chat UI with a scripted engine and no weights: rendering on ratatui's TestBackend with
//! styles asserted (so the accepted-token colours are tested), every key and slash command, and
//! the bundled themes.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Modifier;
use ratatui::Terminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use treespec::chat::scripted::{ScriptLog, ScriptedAnswer, ScriptedEngine};
use treespec::chat::{ChatEvent, StepView, TreeView};
use treespec::engine::{Mode, StageTimes};
use treespec::transcript::Transcript;
use treespec::tui::app::{App, AppOptions};
use treespec::tui::commands::COMMANDS;
use treespec::tui::theme::{StyleKey, Theme, BUNDLED};
use treespec::tui::tree_panel::TreePanel;
use treespec::tui::view;

fn answer() -> ScriptedAnswer {
    ScriptedAnswer::from_steps(
        Mode::Tree,
        &[(&["Hello", " there"], " friend"), (&["!"], "\n")],
    )
}

fn app_with(answers: Vec<ScriptedAnswer>, dir: &std::path::Path) -> (App, Arc<Mutex<ScriptLog>>) {
    let engine = ScriptedEngine::new(answers);
    let log = engine.log();
    let t = Transcript::new(dir, "scripted-target", Some("scripted-drafter"), "cpu");
    let app = App::new(Box::new(engine), t, AppOptions::default());
    (app, log)
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn type_text(app: &mut App, s: &str) {
    for c in s.chars() {
        app.on_key(key(KeyCode::Char(c)));
    }
}

fn finish(app: &mut App) {
    for _ in 0..100 {
        app.poll_engine();
        if !app.generating() {
            return;
        }
    }
    panic!("the scripted answer did not finish");
}

fn render(app: &mut App, w: u16, h: u16) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view::draw(f, app)).unwrap();
    term.backend().buffer().clone()
}

/// Position of the first cell where `text` starts on screen.
fn find(buf: &Buffer, text: &str) -> Option<(u16, u16)> {
    find_in(buf, text, 0..buf.area.width, 0..buf.area.height)
}

/// The same, within columns `xs` and rows `ys`.
fn find_in(
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

fn screen(buf: &Buffer) -> String {
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

#[test]
fn accepted_tokens_are_coloured_by_depth_and_the_target_token_is_marked() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    assert_eq!(log.lock().unwrap().requests.len(), 1);
    let buf = render(&mut app, 120, 30);
    let theme = app.theme().clone();
    // "Hello" was drafted at depth 1, " there" at depth 2, " friend" is the target's own token.
    let (x, y) = find(&buf, "Hello").expect("answer on screen");
    assert_eq!(buf[(x, y)].fg, theme.drafted(1).fg.unwrap());
    let (x, y) = find(&buf, "there").unwrap();
    assert_eq!(buf[(x, y)].fg, theme.drafted(2).fg.unwrap());
    assert_ne!(theme.drafted(1).fg, theme.drafted(2).fg);
    let (x, y) = find(&buf, "friend").unwrap();
    assert_eq!(buf[(x, y)].fg, theme.style(StyleKey::Target).fg.unwrap());
    assert!(buf[(x, y)].modifier.contains(Modifier::UNDERLINED));
    // Labels.
    let (x, y) = find(&buf, "You").unwrap();
    assert_eq!(buf[(x, y)].fg, theme.style(StyleKey::UserLabel).fg.unwrap());

    // Colouring off: the same cells in the plain style.
    app.on_key(key(KeyCode::F(8)));
    assert!(!app.colour);
    let buf = render(&mut app, 120, 30);
    let (x, y) = find(&buf, "Hello").unwrap();
    assert_eq!(buf[(x, y)].fg, theme.style(StyleKey::Plain).fg.unwrap());
    let (x, y) = find(&buf, "friend").unwrap();
    assert!(!buf[(x, y)].modifier.contains(Modifier::UNDERLINED));
}

#[test]
fn tree_panel_highlights_the_accepted_branch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    app.poll_engine(); // Started and the first step
    let buf = render(&mut app, 140, 30);
    let s = screen(&buf);
    assert!(s.contains("draft tree · step"), "{s}");
    assert!(s.contains("nodes 3 · accepted 2"), "{s}");
    let theme = app.theme().clone();
    // The tree panel is the right-hand one; the transcript shows "Hello" too.
    let (px, _) = find(&buf, "draft tree").unwrap();
    let (tx, ty) = find_in(&buf, "Hello", px..140, 0..30).expect("Hello in the tree panel");
    let (cx, _) = find_in(&buf, "Hello", 0..px, 0..30).expect("Hello in the transcript");
    assert!(cx < px && tx > px);
    assert_eq!(
        buf[(tx, ty)].bg,
        theme.style(StyleKey::TreeAccepted).bg.unwrap()
    );
    // The rejected alternative is drawn plainly, and the target's token after the path marked.
    let (rx, ry) = find(&buf, "friend?").unwrap();
    assert_eq!(
        buf[(rx, ry)].fg,
        theme.style(StyleKey::TreeNode).fg.unwrap()
    );
    // F7 hides the panel.
    app.on_key(key(KeyCode::F(7)));
    let s = screen(&render(&mut app, 140, 30));
    assert!(!s.contains("draft tree"));
}

#[test]
fn large_trees_collapse_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![], dir.path());
    for budget in [4usize, 64, 512] {
        let n = budget + 1;
        let parents: Vec<Option<usize>> = (0..n)
            .map(|i| if i == 0 { None } else { Some((i - 1) / 3) })
            .collect();
        let mut depths = vec![0; n];
        for i in 1..n {
            depths[i] = depths[parents[i].unwrap()] + 1;
        }
        let mut accepted = vec![0];
        let mut cur = 0;
        while let Some(c) = (1..n).find(|&c| parents[c] == Some(cur)) {
            accepted.push(c);
            cur = c;
        }
        let step = StepView {
            step: 1,
            mode: Mode::Tree,
            pieces: vec![],
            tree: TreeView {
                labels: (0..n).map(|i| format!("t{i}")).collect(),
                parents,
                depths,
                accepted: accepted.clone(),
                next: "end".into(),
            },
            times: StageTimes {
                verify: Duration::from_millis(12),
                ..Default::default()
            },
        };
        let lines = TreePanel::new(Some(&step), app.theme()).lines(24);
        assert!(lines.len() <= 24, "budget {budget}: {} lines", lines.len());
        let text: String = lines
            .iter()
            .map(|l| {
                l.spans
                    .iter()
                    .map(|s| s.content.to_string())
                    .collect::<String>()
                    + "\n"
            })
            .collect();
        for &a in &accepted {
            assert!(
                text.contains(&format!("t{a}")),
                "accepted node t{a} hidden:\n{text}"
            );
        }
        if budget > 20 {
            assert!(text.contains(&format!("of {budget} nodes")), "{text}");
        } else {
            assert!(!text.contains("showing"), "{text}");
        }
        app.on_engine(ChatEvent::Step(step));
        let s = screen(&render(&mut app, 140, 30));
        assert!(s.contains(&format!("nodes {budget}")));
    }
}

#[test]
fn status_bar_shows_mode_speed_tau_and_greys_out_mtp() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    let buf = render(&mut app, 200, 30);
    let s = screen(&buf);
    assert!(s.contains("τ 2.50"), "5 tokens in 2 steps: {s}");
    assert!(s.contains("tok/s"));
    assert!(s.contains("acc "));
    let shape = format!("B{} L{}", app.settings.budget, app.settings.depth);
    assert!(s.contains(&shape), "{s}");
    assert!(s.contains("target scripted-target"));
    assert!(s.contains("drafter scripted-drafter (causal LM)"));
    let theme = app.theme().clone();
    let status_row = 28..29;
    let (x, y) = find_in(&buf, " tree ", 0..200, status_row.clone()).unwrap();
    assert_eq!(
        buf[(x, y)].bg,
        theme.style(StyleKey::StatusMode).bg.unwrap()
    );
    let (x, y) = find_in(&buf, " mtp ", 0..200, status_row).unwrap();
    assert!(buf[(x + 1, y)].modifier.contains(Modifier::DIM));
}

#[test]
fn small_terminals_get_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![], dir.path());
    let s = screen(&render(&mut app, 30, 8));
    assert!(s.contains("too small"), "{s}");
}

#[test]
fn help_lists_the_real_keymap_and_legend() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![], dir.path());
    app.on_key(key(KeyCode::F(1)));
    assert!(app.show_help);
    let s = screen(&render(&mut app, 120, 50));
    for k in [
        "F2",
        "next mode",
        "Ctrl+R",
        "Ctrl+N",
        "/export md",
        "accepted draft by depth",
    ] {
        assert!(s.contains(k), "help lacks {k}:\n{s}");
    }
    assert!(s.contains("mtp") && s.contains("unavailable"));
    app.on_key(key(KeyCode::Char('x')));
    assert!(!app.show_help);
    assert!(
        app.input.is_empty(),
        "the key that closes the help is not typed"
    );
    // `?` on an empty input opens it too.
    app.on_key(key(KeyCode::Char('?')));
    assert!(app.show_help);
}

#[test]
fn mode_budget_depth_and_temperature_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = app_with(vec![], dir.path());
    assert_eq!(app.settings.mode, Mode::Tree);
    app.on_key(key(KeyCode::F(2)));
    assert_eq!(app.settings.mode, Mode::Ar, "mtp is skipped: unavailable");
    app.on_key(key(KeyCode::F(2)));
    assert_eq!(app.settings.mode, Mode::Linear);
    let g = app.settings.gamma;
    app.on_key(key(KeyCode::F(4)));
    assert_eq!(app.settings.gamma, g + 1);
    app.on_key(key(KeyCode::F(3)));
    app.on_key(key(KeyCode::F(3)));
    assert_eq!(app.settings.gamma, g - 1);
    app.on_key(ctrl('t'));
    assert_eq!(app.settings.mode, Mode::Tree);
    let b = app.settings.budget;
    app.on_key(key(KeyCode::F(4)));
    assert_eq!(app.settings.budget, b * 2);
    app.on_key(key(KeyCode::F(3)));
    app.on_key(key(KeyCode::F(3)));
    assert_eq!(app.settings.budget, b / 2);
    let d = app.settings.depth;
    app.on_key(KeyEvent::new(KeyCode::Char('.'), KeyModifiers::ALT));
    assert_eq!(app.settings.depth, d + 1);
    app.on_key(key(KeyCode::F(6)));
    app.on_key(key(KeyCode::F(6)));
    assert!((app.settings.sampling.temperature - 0.2).abs() < 1e-6);
    app.on_key(key(KeyCode::F(5)));
    assert!((app.settings.sampling.temperature - 0.1).abs() < 1e-6);
    for _ in 0..5 {
        app.on_key(key(KeyCode::F(5)));
    }
    assert_eq!(app.settings.sampling.temperature, 0.0);
    // Every change reached the engine, and the engine agrees.
    app.poll_engine();
    assert_eq!(
        log.lock().unwrap().applied.last().copied(),
        Some(app.settings)
    );
}

#[test]
fn stop_quit_regenerate_and_new_chat() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = app_with(vec![answer(), answer(), answer()], dir.path());
    type_text(&mut app, "first");
    app.on_key(key(KeyCode::Enter));
    assert!(app.generating());
    app.on_key(key(KeyCode::Esc));
    assert_eq!(log.lock().unwrap().stops, 1);
    finish(&mut app);
    // Ctrl+C while generating stops; while idle, twice quits.
    type_text(&mut app, "second");
    app.on_key(key(KeyCode::Enter));
    app.poll_engine();
    app.poll_engine();
    app.on_key(ctrl('c'));
    assert_eq!(log.lock().unwrap().stops, 2);
    assert!(!app.quit);
    finish(&mut app);
    let turns = app.transcript.turns.len();
    assert!(turns >= 1);
    // Regenerate asks again with the same last message.
    app.on_key(ctrl('r'));
    let last_user = log
        .lock()
        .unwrap()
        .requests
        .last()
        .unwrap()
        .last()
        .unwrap()
        .content
        .clone();
    assert_eq!(last_user, app.current.as_ref().unwrap().user);
    finish(&mut app);
    assert_eq!(app.transcript.turns.len(), turns);
    // New chat: a new file, no turns, the old one still on disk.
    let old = app.transcript.path.clone();
    app.on_key(ctrl('n'));
    assert!(app.transcript.turns.is_empty());
    assert_ne!(app.transcript.path, old);
    assert!(old.exists());
    app.on_key(ctrl('c'));
    assert!(!app.quit);
    app.on_key(ctrl('c'));
    assert!(app.quit);
}

#[test]
fn input_editing_newlines_paste_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, log) = app_with(vec![], dir.path());
    type_text(&mut app, "line one");
    app.on_key(ctrl('j'));
    type_text(&mut app, "two");
    app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
    app.on_paste("pasted\r\nthree");
    assert_eq!(app.input.text(), "line one\ntwo\npasted\nthree");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    assert_eq!(
        log.lock().unwrap().requests[0].last().unwrap().content,
        "line one\ntwo\npasted\nthree"
    );
    type_text(&mut app, "draft");
    app.on_key(key(KeyCode::Up));
    assert_eq!(app.input.text(), "line one\ntwo\npasted\nthree");
    app.on_key(key(KeyCode::Down));
    app.on_key(key(KeyCode::Down));
    app.on_key(key(KeyCode::Down));
    app.on_key(key(KeyCode::Down));
    assert_eq!(app.input.text(), "draft");
    app.on_key(ctrl('w'));
    assert_eq!(app.input.text(), "");
}

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
    assert_eq!(app.settings.mode, Mode::Ar);
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
