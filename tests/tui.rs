//! The chat UI with a scripted engine and no weights: rendering on ratatui's TestBackend with
//! styles asserted (so the accepted-token colours are tested), the tree panel, the status bar,
//! help, keys and input editing. Slash commands, themes and exports: `tests/tui_commands.rs`.

mod common;

use common::tui::*;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::Modifier;
use std::time::Duration;
use treespec::chat::scripted::ScriptedAnswer;
use treespec::chat::{ChatEvent, StepView, TreeView};
use treespec::engine::{Mode, StageTimes};
use treespec::tui::theme::StyleKey;
use treespec::tui::tree_panel::TreePanel;

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

/// Markdown in an answer: a heading in bold, code (a fenced block, a code span) on the code
/// background with each token still in its origin's colour, and the marks dimmed, all on screen
/// as written.
#[test]
fn markdown_is_laid_over_the_token_colours() {
    let dir = tempfile::tempdir().unwrap();
    let md = ScriptedAnswer::from_steps(
        Mode::Tree,
        &[
            (&["## Plan", "\n"], "Use "),
            (&["`grep`", " **now**"], ":\n"),
            (&["```sh\n", "ls -l"], "\n```\n"),
        ],
    );
    let (mut app, _) = app_with(vec![md], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    // (80 columns: no tree panel beside the chat, whose nodes show the same text.)
    let buf = render(&mut app, 80, 30);
    let theme = app.theme().clone();
    let code_bg = theme.style(StyleKey::Code).bg.unwrap();
    let markup_fg = theme.style(StyleKey::Markup).fg.unwrap();
    let (x, y) = find(&buf, "## Plan").expect("heading on screen");
    assert_eq!(buf[(x, y)].fg, markup_fg);
    assert!(buf[(x + 3, y)].modifier.contains(Modifier::BOLD));
    assert_eq!(buf[(x + 3, y)].fg, theme.drafted(1).fg.unwrap());
    // The code span: backticks dimmed, its text drafted at depth 1, on the code background.
    let (x, y) = find(&buf, "`grep`").unwrap();
    assert_eq!((buf[(x, y)].fg, buf[(x, y)].bg), (markup_fg, code_bg));
    assert_eq!(buf[(x + 1, y)].fg, theme.drafted(1).fg.unwrap());
    assert_eq!(buf[(x + 1, y)].bg, code_bg);
    // Strong at depth 2; the plain text around it keeps the base background.
    let (x, y) = find(&buf, "now").unwrap();
    assert!(buf[(x, y)].modifier.contains(Modifier::BOLD));
    assert_eq!(buf[(x, y)].fg, theme.drafted(2).fg.unwrap());
    let (x, y) = find(&buf, "Use").unwrap();
    assert_ne!(buf[(x, y)].bg, code_bg);
    // The fenced block: fences dimmed, the code on the code background.
    let (x, y) = find(&buf, "```sh").unwrap();
    assert_eq!(buf[(x, y)].fg, markup_fg);
    let (x, y) = find(&buf, "ls -l").unwrap();
    assert_eq!(buf[(x, y)].bg, code_bg);
    assert_eq!(buf[(x, y)].fg, theme.drafted(2).fg.unwrap());
}

/// A mouse drag selects text in the conversation alone, though the tree panel sits beside it
/// on the same rows; letting go copies it (OSC 52) and the selection shows reversed. The wheel
/// scrolls the conversation, not the input history.
#[test]
fn a_drag_selects_the_conversation_and_not_the_tree_panel() {
    use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
    let mouse = |kind, column, row| MouseEvent {
        kind,
        column,
        row,
        modifiers: KeyModifiers::NONE,
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    let buf = render(&mut app, 140, 30);
    let (x, y) = find(&buf, "Hello there").unwrap();
    app.on_mouse(mouse(MouseEventKind::Down(MouseButton::Left), x, y));
    // Dragged across the tree panel to the screen's right edge.
    app.on_mouse(mouse(MouseEventKind::Drag(MouseButton::Left), 139, y));
    app.on_mouse(mouse(MouseEventKind::Up(MouseButton::Left), 139, y));
    assert_eq!(app.clipboard.as_deref(), Some("Hello there friend!"));
    let buf = render(&mut app, 140, 30);
    assert!(buf[(x, y)].modifier.contains(Modifier::REVERSED));
    assert!(!buf[(x, y + 1)].modifier.contains(Modifier::REVERSED));
    // Over two rows: to the end of the first, from the start of the second.
    let (ux, uy) = find(&buf, "hi").unwrap();
    app.on_mouse(mouse(MouseEventKind::Down(MouseButton::Left), ux, uy));
    app.on_mouse(mouse(MouseEventKind::Drag(MouseButton::Left), x + 4, y));
    app.on_mouse(mouse(MouseEventKind::Up(MouseButton::Left), x + 4, y));
    assert_eq!(app.clipboard.as_deref(), Some("hi\n\nAssistant\n  Hello"));
    // A key ends the selection; the wheel scrolls the conversation; a mouse that only moves
    // changes nothing (no frame is drawn for it).
    app.on_key(key(KeyCode::Char('a')));
    assert_eq!(app.selection, None);
    assert!(app.on_mouse(mouse(MouseEventKind::ScrollUp, x, y)));
    assert_eq!((app.scroll, app.input.text()), (3, "a"));
    assert!(!app.on_mouse(mouse(MouseEventKind::Moved, x, y)));
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
    assert_eq!(app.settings.mode, Mode::Auto, "mtp is skipped: unavailable");
    app.on_key(key(KeyCode::F(2)));
    assert_eq!(app.settings.mode, Mode::Ar);
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

/// With the target's MTP head as drafter the mode key reaches `mtp`, F3/F4 change its k, and the
/// status bar names the head and k.
#[test]
fn the_mode_key_reaches_mtp_with_an_mtp_head() {
    use treespec::chat::scripted::ScriptedEngine;
    use treespec::transcript::Transcript;
    use treespec::tui::app::{App, AppOptions};
    let dir = tempfile::tempdir().unwrap();
    let engine = ScriptedEngine::new(vec![]).with_mtp_head();
    let t = Transcript::new(dir.path(), "scripted-target", Some("head"), "cpu");
    let mut app = App::new(Box::new(engine), t, AppOptions::default());
    assert_eq!(app.settings.mode, Mode::Tree);
    app.on_key(key(KeyCode::F(2)));
    assert_eq!(app.settings.mode, Mode::Mtp);
    // The key steps the head's k (3 by default), not linear's gamma.
    let (k, gamma) = (app.settings.mtp_k, app.settings.gamma);
    assert_eq!(k, treespec::engine::DEFAULT_MTP_K);
    app.on_key(key(KeyCode::F(4)));
    assert_eq!((app.settings.mtp_k, app.settings.gamma), (k + 1, gamma));
    let buf = render(&mut app, 200, 30);
    let text = screen(&buf);
    assert!(text.contains(&format!("k={}", k + 1)), "{text}");
    assert!(text.contains("(MTP head)"), "{text}");
    // `/gamma N` in `mtp` sets the head's k too.
    type_text(&mut app, "/gamma 2");
    app.on_key(key(KeyCode::Enter));
    assert_eq!((app.settings.mtp_k, app.settings.gamma), (2, gamma));
    assert!(app.notice.as_ref().unwrap().text.contains("k 2"));
}

/// With an MTP head beside a causal drafter (the default pair with its shipped head) the mode
/// key reaches `mtp`, and the status bar names the drafter of the mode in force: the causal
/// drafter in `tree`, the head in `mtp`.
#[test]
fn the_status_bar_names_the_drafter_of_the_mode() {
    use treespec::chat::scripted::ScriptedEngine;
    use treespec::transcript::Transcript;
    use treespec::tui::app::{App, AppOptions};
    let dir = tempfile::tempdir().unwrap();
    let engine = ScriptedEngine::new(vec![]).with_head_beside();
    let t = Transcript::new(dir.path(), "scripted-target", Some("drafter"), "cpu");
    let mut app = App::new(Box::new(engine), t, AppOptions::default());
    assert_eq!(app.settings.mode, Mode::Tree);
    let text = screen(&render(&mut app, 220, 30));
    assert!(
        text.contains("drafter scripted-drafter (causal LM)"),
        "{text}"
    );
    app.on_key(key(KeyCode::F(2)));
    assert_eq!(app.settings.mode, Mode::Mtp);
    let text = screen(&render(&mut app, 220, 30));
    assert!(
        text.contains("drafter scripted-head.gguf (MTP head)"),
        "{text}"
    );
}

/// Under each answer: the prompt's length and reading speed, and the wait for the first token.
#[test]
fn an_answer_shows_its_prompt_speed_and_time_to_first_token() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, _) = app_with(vec![answer()], dir.path());
    type_text(&mut app, "hi");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    // The scripted engine reads a prompt of 2 characters (its tokens) in 5 ms, the last of them
    // in the first step, as a model does: 1 token in 5 ms.
    let buf = render(&mut app, 160, 30);
    assert!(find(&buf, "prompt 2 tok at 200 tok/s").is_some());
    assert!(find(&buf, "· first token ").is_some());
    let stats = app.transcript.turns[0].stats;
    assert!(!stats.first_token.is_zero() && stats.first_token <= std::time::Duration::from_secs(5));
    assert_eq!(stats.prefill, Duration::from_millis(5));
    // The next turn: the first message is still cached, so only the rest counts as read (the
    // last token again left to the first step).
    type_text(&mut app, "ok");
    app.on_key(key(KeyCode::Enter));
    finish(&mut app);
    let stats = app.transcript.turns[1].stats;
    assert_eq!(stats.cached_tokens, 2);
    let line = format!(
        "prompt {} tok (2 cached) at {:.0} tok/s",
        stats.prompt_tokens,
        (stats.prompt_tokens - 3) as f64 / 0.005
    );
    assert!(find(&render(&mut app, 160, 30), &line).is_some(), "{line}");
}
