//! Drawing the app: transcript, draft tree panel, input, status bar, key bar and help popup.

mod help;
mod input_box;
mod status_bar;
mod transcript;

pub use help::help_lines;
pub use status_bar::{keybar_spans, status_spans};
pub use transcript::transcript_lines;

use super::app::App;
use super::theme::StyleKey;
use super::tree_panel::TreePanel;
use super::wrap::wrap;
use ratatui::layout::{Constraint, Layout};
use ratatui::widgets::{Block, Paragraph};
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
        // No conversation on screen: nothing for the mouse to select.
        app.chat_view = Default::default();
        app.selection = None;
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
    transcript::draw(f, app, chat);
    if let Some(t) = tree {
        f.render_widget(TreePanel::new(app.last_step.as_ref(), app.theme()), t);
    }
    input_box::draw(f, app, input);
    status_bar::draw_status(f, app, status);
    status_bar::draw_keybar(f, app, keys);
    if app.show_help {
        help::draw(f, app, area);
    }
}
