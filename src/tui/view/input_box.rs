//! The message box: the text wrapped by characters with the cursor placed, the hint when empty,
//! and the notice line in its bottom border.

use crate::tui::app::App;
use crate::tui::theme::StyleKey;
use crate::tui::wrap::{truncate, width};
use ratatui::layout::{Position, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

/// Draw the message box into `area` and place the cursor.
pub(super) fn draw(f: &mut Frame, app: &App, area: Rect) {
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
