//! The mouse: the wheel scrolls the conversation, and a drag selects text in the conversation
//! alone (a terminal's own selection would take the tree panel beside it on the same rows),
//! copied to the clipboard when the button is let go. Shift with a drag still gives most
//! terminals' own selection.

use super::App;
use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Position, Rect};
use unicode_width::UnicodeWidthChar;

/// Lines a notch of the wheel scrolls.
const WHEEL_LINES: usize = 3;

/// The conversation as last drawn: where its text is on screen and the text of each row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatView {
    /// The text area (inside the border).
    pub area: Rect,
    /// The text of each visible row, top first.
    pub rows: Vec<String>,
    /// Which line of the whole conversation the top row shows (when it changes, the text has
    /// moved under any selection, which then ends).
    pub first: usize,
}

/// A selection in the conversation, in screen cells: where the drag began and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// The cell the drag began on.
    pub anchor: Position,
    /// The cell it is on now.
    pub head: Position,
}

impl Selection {
    /// Start and end in reading order.
    fn ordered(&self) -> (Position, Position) {
        let key = |p: &Position| (p.y, p.x);
        match key(&self.anchor) <= key(&self.head) {
            true => (self.anchor, self.head),
            false => (self.head, self.anchor),
        }
    }

    /// Whether the cell at `p` is selected (as a terminal selects: to the end of every row but
    /// the last).
    pub fn contains(&self, p: Position) -> bool {
        let (a, b) = self.ordered();
        let after_start = p.y > a.y || (p.y == a.y && p.x >= a.x);
        let before_end = p.y < b.y || (p.y == b.y && p.x <= b.x);
        after_start && before_end
    }

    /// The selected text of `view`, each row's trailing spaces left out.
    pub fn text(&self, view: &ChatView) -> String {
        let (a, b) = self.ordered();
        let (left, right) = (view.area.x, view.area.right());
        (a.y..=b.y)
            .map(|y| {
                let row = view
                    .rows
                    .get(y.saturating_sub(view.area.y) as usize)
                    .map_or("", String::as_str);
                // (Saturating: the view may have moved since the drag began.)
                let from = if y == a.y { a.x } else { left }.saturating_sub(left);
                let to = if y == b.y { b.x + 1 } else { right }.saturating_sub(left);
                columns(row, from as usize, to as usize)
                    .trim_end()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The characters of `row` that start in columns `from..to` (terminal cells).
fn columns(row: &str, from: usize, to: usize) -> String {
    let mut col = 0;
    let mut out = String::new();
    for c in row.chars() {
        if (from..to).contains(&col) {
            out.push(c);
        }
        col += c.width().unwrap_or(0);
    }
    out
}

/// `p` moved into `area` (a drag past the conversation's edge selects to its edge).
fn clamp(p: Position, area: Rect) -> Position {
    Position {
        x: p.x.min(area.right().saturating_sub(1)).max(area.x),
        y: p.y.min(area.bottom().saturating_sub(1)).max(area.y),
    }
}

impl App {
    /// Take in one mouse event; returns whether it changed anything on screen. Under the help
    /// the mouse does nothing (the conversation is hidden).
    pub fn on_mouse(&mut self, m: MouseEvent) -> bool {
        if self.show_help {
            return false;
        }
        let at = Position::new(m.column, m.row);
        let area = self.chat_view.area;
        match m.kind {
            // The text moves under a selection: it ends.
            MouseEventKind::ScrollUp => {
                self.selection = None;
                self.scroll += WHEEL_LINES;
            }
            MouseEventKind::ScrollDown => {
                self.selection = None;
                self.scroll = self.scroll.saturating_sub(WHEEL_LINES);
            }
            MouseEventKind::Down(MouseButton::Left) => {
                self.selection = area.contains(at).then_some(Selection {
                    anchor: at,
                    head: at,
                });
            }
            MouseEventKind::Drag(MouseButton::Left) => match &mut self.selection {
                Some(s) => s.head = clamp(at, area),
                None => return false,
            },
            MouseEventKind::Up(MouseButton::Left) => {
                let Some(s) = self.selection else {
                    return false;
                };
                if s.anchor == s.head {
                    // A click, not a drag: nothing to copy.
                    self.selection = None;
                    return true;
                }
                let text = s.text(&self.chat_view);
                if !text.is_empty() {
                    self.say(format!("copied {} characters", text.chars().count()));
                    self.clipboard = Some(text);
                }
            }
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ChatView {
        ChatView {
            area: Rect::new(1, 1, 10, 3),
            rows: vec!["hello  ".into(), "wörld 字x".into(), "end".into()],
            first: 0,
        }
    }

    fn sel(ax: u16, ay: u16, hx: u16, hy: u16) -> Selection {
        Selection {
            anchor: Position::new(ax, ay),
            head: Position::new(hx, hy),
        }
    }

    #[test]
    fn a_selection_reads_as_a_terminal_selects() {
        let v = view();
        assert_eq!(sel(2, 1, 4, 1).text(&v), "ell");
        // Backwards, over rows: to the end of the first, from the start of the last.
        assert_eq!(sel(2, 3, 3, 1).text(&v), "llo\nwörld 字x\nen");
        // A wide character takes two cells: the cell after it selects nothing new.
        assert_eq!(sel(7, 2, 8, 2).text(&v), "字");
        assert_eq!(sel(9, 2, 9, 2).text(&v), "x");
        assert!(sel(2, 1, 3, 2).contains(Position::new(9, 1)));
        assert!(!sel(2, 1, 3, 2).contains(Position::new(4, 2)));
        // The view moved right of where the drag began (a resize): no underflow.
        let moved = ChatView {
            area: Rect::new(5, 1, 10, 3),
            ..v
        };
        assert_eq!(sel(2, 1, 6, 1).text(&moved), "he");
        assert_eq!(
            clamp(Position::new(0, 9), Rect::new(5, 1, 0, 0)),
            Position::new(5, 1)
        );
    }
}
