//! Drawing the app: transcript, draft tree panel, input, status bar, key bar and help popup.

use super::app::App;
use super::commands;
use super::keymap::Action;
use super::theme::StyleKey;
use super::tree_panel::TreePanel;
use super::wrap::{truncate, width, wrap};
use crate::chat::Origin;
use crate::engine::Mode;
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};
use ratatui::Frame;

/// Smallest terminal the layout needs.
pub const MIN_WIDTH: u16 = 48;
/// Smallest terminal height the layout needs.
pub const MIN_HEIGHT: u16 = 12;
/// Width from which the tree panel sits beside the transcript rather than below it.
const SIDE_BY_SIDE: u16 = 100;

/// Draw the whole app.
pub fn draw(f: &mut Frame, app: &mut App) {
    let area = f.area();
    let theme = app.theme().clone();
    f.render_widget(Block::default().style(theme.style(StyleKey::Base)), area);
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "terminal too small: {}x{}, treespec needs {MIN_WIDTH}x{MIN_HEIGHT}",
            area.width, area.height
        );
        let lines = wrap(
            &[(&msg, theme.style(StyleKey::Error))],
            area.width as usize,
            0,
        );
        f.render_widget(Paragraph::new(lines), area);
        return;
    }
    let input_rows = (app.input.lines().clamp(1, 6) + 2) as u16;
    let [main, input, status, keys] = Layout::vertical([
        Constraint::Min(4),
        Constraint::Length(input_rows),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    let (chat, tree) = if app.show_tree {
        if main.width >= SIDE_BY_SIDE {
            let [a, b] =
                Layout::horizontal([Constraint::Percentage(62), Constraint::Percentage(38)])
                    .areas(main);
            (a, Some(b))
        } else if main.height >= 16 {
            let [a, b] =
                Layout::vertical([Constraint::Min(6), Constraint::Length(main.height / 3)])
                    .areas(main);
            (a, Some(b))
        } else {
            (main, None)
        }
    } else {
        (main, None)
    };
    draw_transcript(f, app, chat);
    if let Some(t) = tree {
        f.render_widget(TreePanel::new(app.last_step.as_ref(), app.theme()), t);
    }
    draw_input(f, app, input);
    draw_status(f, app, status);
    draw_keybar(f, app, keys);
    if app.show_help {
        draw_help(f, app, area);
    }
}

fn origin_style(app: &App, o: Origin) -> Style {
    let t = app.theme();
    if !app.colour {
        return t.style(StyleKey::Plain);
    }
    match o {
        Origin::Plain => t.style(StyleKey::Plain),
        Origin::Drafted { depth } => t.drafted(depth),
        Origin::Target => t.style(StyleKey::Target),
    }
}

/// The transcript as wrapped lines for a view `width` cells wide.
pub fn transcript_lines(app: &App, width: usize) -> Vec<Line<'static>> {
    let t = app.theme();
    let mut lines = vec![];
    if let Some(s) = &app.transcript.system {
        lines.extend(wrap(
            &[
                ("system: ", t.style(StyleKey::SystemText)),
                (s, t.style(StyleKey::SystemText)),
            ],
            width,
            0,
        ));
        lines.push(Line::default());
    }
    let turns: Vec<_> = app.turns().collect();
    if turns.is_empty() {
        let help = app.keymap.first_key(Action::Help);
        lines.extend(wrap(
            &[(
                &format!(
                    "Type a message and press Enter. Accepted draft tokens are coloured by their \
                     depth in the tree; the target's own tokens are underlined. {help} shows \
                     every key."
                ),
                t.style(StyleKey::Placeholder),
            )],
            width,
            0,
        ));
        return lines;
    }
    for (i, turn) in turns.iter().enumerate() {
        lines.push(Line::from(Span::styled(
            "You",
            t.style(StyleKey::UserLabel),
        )));
        lines.extend(wrap(&[(&turn.user, t.style(StyleKey::UserText))], width, 2));
        lines.push(Line::default());
        lines.push(Line::from(Span::styled(
            "Assistant",
            t.style(StyleKey::AssistantLabel),
        )));
        let pieces: Vec<(&str, Style)> = turn
            .tokens
            .iter()
            .map(|p| (p.text.as_str(), origin_style(app, p.origin)))
            .collect();
        let in_progress = i + 1 == turns.len() && app.current.is_some();
        if pieces.is_empty() && in_progress {
            lines.push(Line::from(Span::styled(
                "  …",
                t.style(StyleKey::Placeholder),
            )));
        } else {
            lines.extend(wrap(&pieces, width, 2));
        }
        if let Some(stop) = turn.stop {
            let why = match stop {
                crate::engine::StopReason::Cancelled => " · stopped",
                crate::engine::StopReason::MaxTokens => " · token limit",
                crate::engine::StopReason::ContextFull => " · context full",
                crate::engine::StopReason::StopToken => "",
            };
            lines.push(Line::from(Span::styled(
                format!(
                    "  {} tokens · {:.1} tok/s · τ {:.2}{why}",
                    turn.stats.tokens,
                    turn.stats.tokens_per_sec(),
                    turn.stats.tau()
                ),
                t.style(StyleKey::TreeDim),
            )));
        }
        lines.push(Line::default());
    }
    lines
}

fn draw_transcript(f: &mut Frame, app: &mut App, area: Rect) {
    let t = app.theme().clone();
    let inner_w = area.width.saturating_sub(2) as usize;
    let inner_h = area.height.saturating_sub(2) as usize;
    let lines = transcript_lines(app, inner_w);
    let total = lines.len();
    let max_scroll = total.saturating_sub(inner_h);
    app.scroll = app.scroll.min(max_scroll);
    app.page = inner_h.saturating_sub(1).max(1);
    let start = total.saturating_sub(inner_h + app.scroll);
    let visible: Vec<Line> = lines.into_iter().skip(start).take(inner_h).collect();
    let mut title = vec![Span::styled(" treespec ", t.style(StyleKey::Title))];
    if app.scroll > 0 {
        title.push(Span::styled(
            format!("· ↓ {} more lines (Ctrl+End) ", app.scroll),
            t.style(StyleKey::Notice),
        ));
    }
    let block = Block::bordered()
        .title(Line::from(title))
        .border_style(t.style(StyleKey::Border));
    f.render_widget(Paragraph::new(visible).block(block), area);
}

fn draw_input(f: &mut Frame, app: &App, area: Rect) {
    let t = app.theme();
    let mut block = Block::bordered()
        .title(Span::styled(" message ", t.style(StyleKey::Title)))
        .border_style(t.style(if app.generating() {
            StyleKey::Border
        } else {
            StyleKey::BorderFocus
        }));
    if let Some(n) = &app.notice {
        let style = t.style(if n.error {
            StyleKey::Error
        } else {
            StyleKey::Notice
        });
        let max = area.width.saturating_sub(4) as usize;
        block = block.title_bottom(Line::from(Span::styled(
            format!(" {} ", truncate(&n.text, max)),
            style,
        )));
    }
    let inner = block.inner(area);
    let w = inner.width as usize;
    if app.input.is_empty() {
        let hint = if app.generating() {
            "generating… (Esc stops)"
        } else {
            "message, or /help"
        };
        f.render_widget(
            Paragraph::new(Span::styled(hint, t.style(StyleKey::Placeholder))).block(block),
            area,
        );
        f.set_cursor_position(Position::new(inner.x, inner.y));
        return;
    }
    // Wrap by characters so the cursor position is easy to place.
    let (cur_line, cur_col) = app.input.cursor_pos();
    let mut rows: Vec<String> = vec![];
    let mut cursor = (0usize, 0usize);
    for (li, line) in app.input.text().split('\n').enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut row = String::new();
        let mut rw = 0;
        let mut col = 0;
        for (ci, c) in chars.iter().enumerate() {
            if li == cur_line && ci == cur_col {
                cursor = (rows.len(), rw);
            }
            let cw = width(&c.to_string());
            if rw + cw > w.max(1) {
                rows.push(std::mem::take(&mut row));
                rw = 0;
                if li == cur_line && ci == cur_col {
                    cursor = (rows.len(), 0);
                }
            }
            row.push(*c);
            rw += cw;
            col += 1;
        }
        if li == cur_line && cur_col >= col {
            if rw >= w.max(1) {
                rows.push(std::mem::take(&mut row));
                rw = 0;
            }
            cursor = (rows.len(), rw);
        }
        rows.push(row);
    }
    let h = inner.height as usize;
    let first = (cursor.0 + 1).saturating_sub(h);
    let lines: Vec<Line> = rows
        .iter()
        .skip(first)
        .take(h)
        .map(|r| Line::from(Span::styled(r.clone(), t.style(StyleKey::Input))))
        .collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
    f.set_cursor_position(Position::new(
        inner.x + cursor.1 as u16,
        inner.y + (cursor.0 - first) as u16,
    ));
}

/// The status bar's spans.
pub fn status_spans(app: &App) -> Vec<Span<'static>> {
    let t = app.theme();
    let s = app.settings;
    let info = app.engine.info();
    let sep = || Span::styled(" │ ", t.style(StyleKey::StatusDim));
    let mut spans = vec![];
    for m in Mode::ALL {
        let name = format!(" {} ", m.name());
        let style = if m == s.mode {
            t.style(StyleKey::StatusMode)
        } else if info.why_unavailable(m).is_some() {
            t.style(StyleKey::StatusDim)
                .patch(t.style(StyleKey::Disabled))
        } else {
            t.style(StyleKey::StatusDim)
        };
        spans.push(Span::styled(name, style));
    }
    spans.push(sep());
    let shape = s.shape();
    let shape = if shape.is_empty() {
        "—".into()
    } else {
        shape
    };
    spans.push(Span::styled(shape, t.style(StyleKey::Status)));
    spans.push(sep());
    spans.push(Span::styled(
        if s.sampling.is_greedy() {
            "T 0 (greedy)".to_string()
        } else {
            format!("T {:.1}", s.sampling.temperature)
        },
        t.style(StyleKey::Status),
    ));
    spans.push(sep());
    let st = app.stats;
    spans.push(Span::styled(
        format!("{:.1} tok/s", st.tokens_per_sec()),
        t.style(StyleKey::Status),
    ));
    spans.push(sep());
    spans.push(Span::styled(
        format!("τ {:.2}", st.tau()),
        t.style(StyleKey::Status),
    ));
    spans.push(sep());
    spans.push(Span::styled(
        match st.acceptance() {
            Some(a) => format!("acc {:.0}%", a * 100.0),
            None => "acc –".into(),
        },
        t.style(StyleKey::Status),
    ));
    spans.push(sep());
    spans.push(Span::styled(
        format!("target {}", truncate(&info.target, 28)),
        t.style(StyleKey::Status),
    ));
    if let Some(d) = &info.drafter {
        spans.push(sep());
        let kind = info.drafter_kind.as_deref().unwrap_or("drafter");
        spans.push(Span::styled(
            format!("drafter {} ({kind})", truncate(d, 28)),
            t.style(StyleKey::Status),
        ));
    }
    spans.push(sep());
    spans.push(Span::styled(info.device.clone(), t.style(StyleKey::Status)));
    spans
}

fn draw_status(f: &mut Frame, app: &App, area: Rect) {
    let t = app.theme();
    f.render_widget(
        Paragraph::new(Line::from(status_spans(app))).style(t.style(StyleKey::Status)),
        area,
    );
}

/// The key bar: the keys that matter in the current state.
pub fn keybar_spans(app: &App) -> Vec<Span<'static>> {
    let t = app.theme();
    let k = |a: Action| app.keymap.first_key(a);
    let items: Vec<(String, &str)> = if app.show_help {
        vec![("any key".into(), "close help")]
    } else if app.generating() {
        vec![
            (k(Action::Stop), "stop"),
            (k(Action::PageUp), "scroll"),
            (k(Action::ToggleTree), "tree"),
            (k(Action::CycleMode), "mode"),
            (k(Action::Help), "help"),
        ]
    } else if !app.input.is_empty() {
        vec![
            (k(Action::Send), "send"),
            (k(Action::Newline), "new line"),
            ("Up/Down".into(), "history"),
            (k(Action::Help), "help"),
        ]
    } else {
        vec![
            (k(Action::Send), "send"),
            (k(Action::CycleMode), "mode"),
            (
                format!("{}/{}", k(Action::BudgetDown), k(Action::BudgetUp)),
                "budget",
            ),
            (
                format!("{}/{}", k(Action::TempDown), k(Action::TempUp)),
                "temp",
            ),
            (k(Action::Regenerate), "regenerate"),
            (k(Action::NewChat), "new chat"),
            (k(Action::Help), "help"),
            ("Ctrl+C×2".into(), "quit"),
        ]
    };
    let mut spans = vec![];
    for (i, (key, what)) in items.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled("  ", t.style(StyleKey::Keybar)));
        }
        spans.push(Span::styled(key, t.style(StyleKey::Key)));
        spans.push(Span::styled(format!(" {what}"), t.style(StyleKey::Keybar)));
    }
    spans
}

fn draw_keybar(f: &mut Frame, app: &App, area: Rect) {
    let t = app.theme();
    f.render_widget(
        Paragraph::new(Line::from(keybar_spans(app))).style(t.style(StyleKey::Keybar)),
        area,
    );
}

/// The help popup's lines: every key from the real keymap, the slash commands, the modes and the
/// colour legend.
pub fn help_lines(app: &App) -> Vec<Line<'static>> {
    let t = app.theme();
    let mut lines = vec![Line::from(Span::styled("keys", t.style(StyleKey::Title)))];
    let help = app.keymap.help();
    let kw = help
        .iter()
        .map(|(k, _)| width(k))
        .max()
        .unwrap_or(0)
        .min(28);
    for (keys, what) in help {
        lines.push(Line::from(vec![
            Span::styled(
                format!("  {:<kw$}  ", truncate(&keys, kw)),
                t.style(StyleKey::Key),
            ),
            Span::styled(what, t.style(StyleKey::Plain)),
        ]));
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(
        "commands",
        t.style(StyleKey::Title),
    )));
    let rows = commands::help_rows();
    let cw = rows
        .iter()
        .map(|(u, _)| width(u))
        .max()
        .unwrap_or(0)
        .min(44);
    for (usage, what) in rows {
        lines.push(Line::from(vec![
            Span::styled(format!("  {usage:<cw$}  "), t.style(StyleKey::Key)),
            Span::styled(what, t.style(StyleKey::Plain)),
        ]));
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled("modes", t.style(StyleKey::Title))));
    let info = app.engine.info();
    for m in Mode::ALL {
        let (style, why) = match info.why_unavailable(m) {
            Some(w) => (t.style(StyleKey::Disabled), format!(" (unavailable: {w})")),
            None => (t.style(StyleKey::Plain), String::new()),
        };
        let what = match m {
            Mode::Ar => "plain decoding, one target token per step",
            Mode::Linear => "drafter chain, verified linearly",
            Mode::Tree => "DDTree: a draft tree verified in one pass, then walked",
            Mode::Mtp => "the target's own multi-token-prediction head drafts",
        };
        lines.push(Line::from(Span::styled(
            format!("  {:<7} {what}{why}", m.name()),
            style,
        )));
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(
        "colours",
        t.style(StyleKey::Title),
    )));
    let mut legend = vec![Span::styled(
        "  accepted draft by depth ",
        t.style(StyleKey::Plain),
    )];
    for d in 1..=t.drafted_shades() {
        legend.push(Span::styled(format!("d{d} "), t.drafted(d)));
    }
    lines.push(Line::from(legend));
    lines.push(Line::from(vec![
        Span::styled("  ", t.style(StyleKey::Plain)),
        Span::styled("target's own token", t.style(StyleKey::Target)),
        Span::styled(" (bonus or correction)   ", t.style(StyleKey::Plain)),
        Span::styled("plain ar token", t.style(StyleKey::Plain)),
    ]));
    lines.push(Line::from(vec![
        Span::styled("  tree: ", t.style(StyleKey::Plain)),
        Span::styled("accepted path", t.style(StyleKey::TreeAccepted)),
        Span::styled(" then ", t.style(StyleKey::Plain)),
        Span::styled("the target's token", t.style(StyleKey::TreeNext)),
    ]));
    lines
}

fn draw_help(f: &mut Frame, app: &App, area: Rect) {
    let t = app.theme();
    let w = (area.width * 9 / 10).clamp(MIN_WIDTH.min(area.width), 100);
    let h = (area.height * 9 / 10).max(8);
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, rect);
    let block = Block::bordered()
        .title(Span::styled(
            " help · any key closes ",
            t.style(StyleKey::Title),
        ))
        .border_style(t.style(StyleKey::BorderFocus))
        .style(t.style(StyleKey::Base));
    f.render_widget(Paragraph::new(help_lines(app)).block(block), rect);
}
