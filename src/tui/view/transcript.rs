//! The conversation panel: the turns as wrapped, coloured lines, scrolled.

use crate::chat::Origin;
use crate::transcript::Turn;
use crate::tui::app::{App, ChatView};
use crate::tui::keymap::Action;
use crate::tui::markdown;
use crate::tui::theme::StyleKey;
use crate::tui::wrap::wrap;
use ratatui::layout::{Position, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

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

/// A turn's answer (its reasoning left out) as runs of one style: each token in its origin's
/// colour, with Markdown's looks laid over them ([`markdown::looks`]).
fn answer_pieces(app: &App, turn: &Turn) -> Vec<(String, Style)> {
    let t = app.theme();
    let tokens: Vec<_> = turn.tokens.iter().filter(|p| !p.reasoning).collect();
    let text: String = tokens.iter().map(|p| p.text.as_str()).collect();
    let mut looks = markdown::looks(&text).into_iter();
    let mut out: Vec<(String, Style)> = vec![];
    for p in tokens {
        let origin = origin_style(app, p.origin);
        for c in p.text.chars() {
            let look = looks.next().unwrap_or_default();
            let mut style = origin;
            if look.code {
                style = style.patch(t.style(StyleKey::Code));
            }
            if look.markup {
                style = style.patch(t.style(StyleKey::Markup));
            }
            if look.heading || look.strong {
                style = style.add_modifier(Modifier::BOLD);
            }
            if look.emphasis {
                style = style.add_modifier(Modifier::ITALIC);
            }
            match out.last_mut() {
                Some((s, st)) if *st == style => s.push(c),
                _ => out.push((c.to_string(), style)),
            }
        }
    }
    out
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
        let in_progress = i + 1 == turns.len() && app.current.is_some();
        lines.extend(reasoning_lines(app, turn, in_progress, width));
        let styled = answer_pieces(app, turn);
        let pieces: Vec<(&str, Style)> = styled.iter().map(|(s, st)| (s.as_str(), *st)).collect();
        if pieces.is_empty() && in_progress && turn.reasoning_tokens() == 0 {
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
            let st = &turn.stats;
            // The prompt's speed and the wait for the first token, where they were measured.
            let prompt = match st.prefill.is_zero() {
                true => String::new(),
                false => format!(
                    " · prompt {} tok{}{}",
                    st.prompt_tokens,
                    match st.cached_tokens {
                        0 => String::new(),
                        c => format!(" ({c} cached)"),
                    },
                    match st.read_tokens() {
                        0 => String::new(),
                        _ => format!(" at {:.0} tok/s", st.prompt_tokens_per_sec()),
                    }
                ),
            };
            let first = match st.first_token.is_zero() {
                true => String::new(),
                false => format!(" · first token {} ms", st.first_token.as_millis()),
            };
            lines.push(Line::from(Span::styled(
                format!(
                    "  {} tokens · {:.1} tok/s · τ {:.2}{prompt}{first}{why}",
                    st.tokens,
                    st.tokens_per_sec(),
                    st.tau()
                ),
                t.style(StyleKey::TreeDim),
            )));
        }
        lines.push(Line::default());
        if i + 1 == app.forgotten {
            lines.push(Line::from(Span::styled(
                match i {
                    0 => "  ── the turn above is out of the model's context ──".to_string(),
                    _ => format!(
                        "  ── the {} turns above are out of the model's context ──",
                        i + 1
                    ),
                },
                t.style(StyleKey::Placeholder),
            )));
            lines.push(Line::default());
        }
    }
    lines
}

/// A thinking model's reasoning in an answer: one folded line (how long it thought, and the key
/// that unfolds it), or unfolded, its text in the reasoning style; nothing for other answers.
fn reasoning_lines(app: &App, turn: &Turn, in_progress: bool, width: usize) -> Vec<Line<'static>> {
    let n = turn.reasoning_tokens();
    if n == 0 {
        return vec![];
    }
    let style = app.theme().style(StyleKey::Reasoning);
    if app.show_reasoning {
        let mut lines = wrap(&[(&turn.reasoning(), style)], width, 2);
        lines.push(Line::default());
        return lines;
    }
    let still = in_progress && turn.tokens.last().is_some_and(|p| p.reasoning);
    let key = app.keymap.first_key(Action::ToggleReasoning);
    let what = match still {
        true => "thinking…",
        false => "reasoning",
    };
    vec![Line::from(Span::styled(
        format!("  ▸ {what} {n} tokens ({key} unfolds)"),
        style,
    ))]
}

/// Draw the conversation into `area`, keeping the scroll position within the text.
pub(super) fn draw(f: &mut Frame, app: &mut App, area: Rect) {
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
    let view = ChatView {
        area: Rect::new(area.x + 1, area.y + 1, inner_w as u16, inner_h as u16),
        rows: visible
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect(),
        first: start,
    };
    if view.first != app.chat_view.first || view.area != app.chat_view.area {
        app.selection = None;
    }
    app.chat_view = view;
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
    if let Some(sel) = app.selection {
        let text = app.chat_view.area;
        let buf = f.buffer_mut();
        for y in text.top()..text.bottom() {
            for x in text.left()..text.right() {
                if sel.contains(Position::new(x, y)) {
                    buf[(x, y)].modifier.insert(Modifier::REVERSED);
                }
            }
        }
    }
}
