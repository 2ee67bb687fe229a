//! The help popup: every key from the real keymap, the slash commands from their table, the modes
//! and the colour legend.

use super::MIN_WIDTH;
use crate::engine::Mode;
use crate::tui::app::App;
use crate::tui::commands;
use crate::tui::theme::StyleKey;
use crate::tui::wrap::{truncate, width};
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};
use ratatui::Frame;

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
    let mouse = (
        "mouse".to_string(),
        "wheel scrolls; a drag selects in the conversation and copies it; Shift+drag: the \
         terminal's own selection",
    );
    for (keys, what) in help.into_iter().chain([mouse]) {
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
            Mode::Auto => "per step, whichever of ar, linear and tree has been fastest here",
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

/// Draw the help popup over the middle of `area`.
pub(super) fn draw(f: &mut Frame, app: &App, area: Rect) {
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
