//! The status bar (modes, shape, temperature, rates, models) and the key bar under it.

use crate::engine::Mode;
use crate::tui::app::App;
use crate::tui::keymap::Action;
use crate::tui::theme::StyleKey;
use crate::tui::wrap::truncate;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

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
    // How full the model's context was at the end of the last answer.
    let context = info.context.max(1);
    let used = app.context_used();
    spans.push(sep());
    spans.push(Span::styled(
        format!("ctx {}%", (used * 100).div_ceil(context).min(100)),
        t.style(if used * 10 >= context * 9 {
            StyleKey::Error
        } else {
            StyleKey::Status
        }),
    ));
    if let Some(share) = st.ahead_share().filter(|_| st.ahead > 0) {
        // How much of the draft the drafter had ready before its step began (on a GPU it drafts
        // while the target verifies).
        spans.push(sep());
        spans.push(Span::styled(
            format!("ahead {:.0}%", share * 100.0),
            t.style(StyleKey::Status),
        ));
    }
    spans.push(sep());
    spans.push(Span::styled(
        format!("target {}", truncate(&info.target, 28)),
        t.style(StyleKey::Status),
    ));
    if let Some((d, kind)) = info.drafter_of(s.mode) {
        spans.push(sep());
        spans.push(Span::styled(
            format!("drafter {} ({kind})", truncate(d, 28)),
            t.style(StyleKey::Status),
        ));
    }
    spans.push(sep());
    spans.push(Span::styled(info.device.clone(), t.style(StyleKey::Status)));
    spans
}

/// Draw the status bar into `area`.
pub(super) fn draw_status(f: &mut Frame, app: &App, area: Rect) {
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

/// Draw the key bar into `area`.
pub(super) fn draw_keybar(f: &mut Frame, app: &App, area: Rect) {
    let t = app.theme();
    f.render_widget(
        Paragraph::new(Line::from(keybar_spans(app))).style(t.style(StyleKey::Keybar)),
        area,
    );
}
