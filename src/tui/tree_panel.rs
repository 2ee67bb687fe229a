//! The draft tree panel: the last step's tree, its accepted path and the target's own token
//! after it, as a ratatui [`Widget`]. Large trees collapse: the accepted path always shows, then
//! as many of the most probable nodes as fit, with `+k` on nodes whose children are hidden.

use super::theme::{StyleKey, Theme};
use super::wrap::truncate;
use crate::chat::StepView;
use crate::engine::Mode;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Widget};

/// The styles the panel draws with.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TreeStyles {
    /// The panel title and the mode name.
    pub title: Style,
    /// The border.
    pub border: Style,
    /// The hint shown before the first step.
    pub placeholder: Style,
    /// The root.
    pub root: Style,
    /// Drafted nodes the target did not accept (and the node count).
    pub node: Style,
    /// The accepted path.
    pub accepted: Style,
    /// The target's own token after the accepted path.
    pub next: Style,
    /// Timings, indentation, hidden-children counts.
    pub dim: Style,
}

impl TreeStyles {
    /// The styles of a theme.
    pub fn from_theme(t: &Theme) -> Self {
        TreeStyles {
            title: t.style(StyleKey::Title),
            border: t.style(StyleKey::Border),
            placeholder: t.style(StyleKey::Placeholder),
            root: t.style(StyleKey::TreeRoot),
            node: t.style(StyleKey::TreeNode),
            accepted: t.style(StyleKey::TreeAccepted),
            next: t.style(StyleKey::TreeNext),
            dim: t.style(StyleKey::TreeDim),
        }
    }
}

/// The panel for one step (or the hint before the first step).
#[derive(Debug, Clone, Copy)]
pub struct TreePanel<'a> {
    /// The step whose tree is shown.
    pub step: Option<&'a StepView>,
    /// The styles.
    pub styles: TreeStyles,
}

/// A token label for the tree: whitespace made visible, cut to a few cells.
pub fn tree_label(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '\n' => out.push('⏎'),
            '\t' => out.push('⇥'),
            ' ' => out.push('·'),
            c if c.is_control() => out.push('�'),
            c => out.push(c),
        }
    }
    if out.is_empty() {
        out.push('∅');
    }
    truncate(&out, 18)
}

impl<'a> TreePanel<'a> {
    /// The panel for `step` in the styles of `theme`.
    pub fn new(step: Option<&'a StepView>, theme: &Theme) -> Self {
        TreePanel {
            step,
            styles: TreeStyles::from_theme(theme),
        }
    }

    /// The panel's lines inside a border `rows` rows high.
    pub fn lines(&self, rows: usize) -> Vec<Line<'static>> {
        let st = &self.styles;
        let Some(step) = self.step else {
            return vec![Line::from(Span::styled(
                "the last step's draft tree appears here",
                st.placeholder,
            ))];
        };
        let tree = &step.tree;
        let n = tree.labels.len();
        let mut lines = vec![];
        let verify_ms = step.times.verify.as_secs_f64() * 1e3;
        let draft_ms = step.times.draft.as_secs_f64() * 1e3;
        lines.push(Line::from(vec![
            Span::styled(format!("{} ", step.mode), st.title),
            Span::styled(
                format!("nodes {} · accepted {}", tree.drafted(), step.accepted()),
                st.node,
            ),
        ]));
        lines.push(Line::from(Span::styled(
            format!("verify {verify_ms:.1} ms · draft {draft_ms:.1} ms"),
            st.dim,
        )));
        if step.mode == Mode::Ar || n <= 1 {
            lines.push(Line::from(Span::styled(
                "ar: one target token per step, nothing drafted",
                st.dim,
            )));
            lines.push(Line::from(vec![
                Span::styled("next ", st.dim),
                Span::styled(tree_label(&tree.next), st.next),
            ]));
            return lines;
        }
        // Which nodes fit: the accepted path always, then nodes in the builder's order (most
        // probable first); a node's ancestors come before it in that order, so the shown set is
        // always a connected tree.
        let budget_rows = rows.saturating_sub(4).max(1);
        let mut shown = vec![false; n];
        for &a in &tree.accepted {
            if let Some(s) = shown.get_mut(a) {
                *s = true;
            }
        }
        let mut count = tree.accepted.len();
        for s in shown.iter_mut() {
            if count >= budget_rows {
                break;
            }
            if !*s {
                *s = true;
                count += 1;
            }
        }
        // Ancestors of shown nodes (the accepted path's are on it already).
        for i in (0..n).rev() {
            if shown[i] {
                if let Some(&Some(p)) = tree.parents.get(i) {
                    if p < n {
                        shown[p] = true;
                    }
                }
            }
        }
        let mut children = vec![vec![]; n];
        for (i, p) in tree.parents.iter().enumerate() {
            if let Some(c) = p.and_then(|p| children.get_mut(p)) {
                c.push(i);
            }
        }
        let accepted: std::collections::HashSet<usize> = tree.accepted.iter().copied().collect();
        let last_accepted = *tree.accepted.last().unwrap_or(&0);
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            let depth = tree.depths.get(i).copied().unwrap_or(0);
            let indent = "  ".repeat(depth.min(12));
            let style = if i == 0 {
                st.root
            } else if accepted.contains(&i) {
                st.accepted
            } else {
                st.node
            };
            let label = if i == 0 {
                format!("● {}", tree_label(&tree.labels[0]))
            } else {
                tree_label(&tree.labels[i])
            };
            let mut spans = vec![Span::styled(indent, st.dim), Span::styled(label, style)];
            if i == last_accepted {
                spans.push(Span::styled(" → ", st.dim));
                spans.push(Span::styled(tree_label(&tree.next), st.next));
            }
            let hidden = children[i].iter().filter(|&&c| !shown[c]).count();
            if hidden > 0 {
                spans.push(Span::styled(format!("  +{hidden}"), st.dim));
            }
            lines.push(Line::from(spans));
            for &c in children[i].iter().rev() {
                if shown[c] {
                    stack.push(c);
                }
            }
        }
        let visible = shown.iter().filter(|&&s| s).count();
        if visible < n {
            lines.push(Line::from(Span::styled(
                format!(
                    "showing {} of {} nodes (+k: hidden children)",
                    visible - 1,
                    n - 1
                ),
                st.dim,
            )));
        }
        lines
    }
}

impl Widget for TreePanel<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let title = match self.step {
            Some(s) => format!(" draft tree · step {} ", s.step),
            None => " draft tree ".to_string(),
        };
        let block = Block::bordered()
            .title(Span::styled(title, self.styles.title))
            .border_style(self.styles.border);
        let lines = self.lines(block.inner(area).height as usize);
        Paragraph::new(lines).block(block).render(area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::TreeView;
    use crate::engine::StageTimes;
    use ratatui::style::{Color, Modifier};
    use std::time::Duration;

    /// Distinct styles, so the golden buffers say which style each cell has.
    fn styles() -> TreeStyles {
        TreeStyles {
            title: Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            border: Style::new().fg(Color::DarkGray),
            placeholder: Style::new().add_modifier(Modifier::ITALIC),
            root: Style::new().fg(Color::LightYellow),
            node: Style::new().fg(Color::Gray),
            accepted: Style::new().fg(Color::Black).bg(Color::Green),
            next: Style::new().fg(Color::Black).bg(Color::Yellow),
            dim: Style::new().fg(Color::Blue),
        }
    }

    fn step(tree: TreeView) -> StepView {
        StepView {
            step: 3,
            mode: Mode::Tree,
            pieces: vec![],
            tree,
            times: StageTimes {
                draft: Duration::from_millis(3),
                verify: Duration::from_millis(9),
                ..Default::default()
            },
        }
    }

    fn render(panel: TreePanel, w: u16, h: u16) -> Buffer {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        panel.render(buf.area, &mut buf);
        buf
    }

    /// Style the border of `buf` and its title (which starts after the corner).
    fn frame(buf: &mut Buffer, title_len: u16) {
        let st = styles();
        let a = buf.area;
        for r in [
            Rect::new(0, 0, a.width, 1),
            Rect::new(0, a.height - 1, a.width, 1),
            Rect::new(0, 0, 1, a.height),
            Rect::new(a.width - 1, 0, 1, a.height),
        ] {
            buf.set_style(r, st.border);
        }
        buf.set_style(Rect::new(1, 0, title_len, 1), st.title);
    }

    /// Style `len` cells from column `x` (inside the border) of row `y`.
    fn paint(buf: &mut Buffer, x: u16, y: u16, len: u16, style: Style) {
        buf.set_style(Rect::new(1 + x, y, len, 1), style);
    }

    #[test]
    fn a_small_tree_with_its_accepted_branch() {
        // Budget 6, depth 3. The target accepted " a big" and then chose " cat" over " dog".
        let tree = TreeView {
            labels: [" is", " a", " the", " big", " small", " dog", "\n"]
                .map(String::from)
                .to_vec(),
            parents: vec![None, Some(0), Some(0), Some(1), Some(1), Some(3), Some(2)],
            depths: vec![0, 1, 1, 2, 2, 3, 2],
            accepted: vec![0, 1, 3],
            next: " cat".into(),
        };
        let step = step(tree);
        let buf = render(
            TreePanel {
                step: Some(&step),
                styles: styles(),
            },
            32,
            13,
        );
        let mut expected = Buffer::with_lines([
            "┌ draft tree · step 3 ─────────┐",
            "│tree nodes 6 · accepted 2     │",
            "│verify 9.0 ms · draft 3.0 ms  │",
            "│● ·is                         │",
            "│  ·a                          │",
            "│    ·big → ·cat               │",
            "│      ·dog                    │",
            "│    ·small                    │",
            "│  ·the                        │",
            "│    ⏎                         │",
            "│                              │",
            "│                              │",
            "└──────────────────────────────┘",
        ]);
        let st = styles();
        frame(&mut expected, 21);
        let e = &mut expected;
        paint(e, 0, 1, 5, st.title); // "tree "
        paint(e, 5, 1, 20, st.node); // "nodes 6 · accepted 2"
        paint(e, 0, 2, 28, st.dim);
        paint(e, 0, 3, 5, st.root); // "● ·is"
        paint(e, 0, 4, 2, st.dim);
        paint(e, 2, 4, 2, st.accepted); // "·a"
        paint(e, 0, 5, 4, st.dim);
        paint(e, 4, 5, 4, st.accepted); // "·big"
        paint(e, 8, 5, 3, st.dim); // " → "
        paint(e, 11, 5, 4, st.next); // "·cat"
        paint(e, 0, 6, 6, st.dim);
        paint(e, 6, 6, 4, st.node); // "·dog"
        paint(e, 0, 7, 4, st.dim);
        paint(e, 4, 7, 6, st.node); // "·small"
        paint(e, 0, 8, 2, st.dim);
        paint(e, 2, 8, 4, st.node); // "·the"
        paint(e, 0, 9, 4, st.dim);
        paint(e, 4, 9, 1, st.node); // "⏎"
        assert_eq!(buf, expected);
    }

    #[test]
    fn a_large_tree_collapses_around_the_accepted_path() {
        // 40 drafted nodes, three children each (node i's parent is (i - 1) / 3); the accepted
        // path follows first children: 0, 1, 4, 13, 40.
        let n = 41;
        let parents: Vec<Option<usize>> = (0..n).map(|i| (i > 0).then(|| (i - 1) / 3)).collect();
        let mut depths = vec![0; n];
        for i in 1..n {
            depths[i] = depths[(i - 1) / 3] + 1;
        }
        let tree = TreeView {
            labels: (0..n).map(|i| format!("t{i}")).collect(),
            parents,
            depths,
            accepted: vec![0, 1, 4, 13, 40],
            next: "end".into(),
        };
        let step = step(tree);
        let buf = render(
            TreePanel {
                step: Some(&step),
                styles: styles(),
            },
            46,
            12,
        );
        // 10 rows inside: 4 for the header and the summary, so 6 nodes: the 5 accepted and the
        // most probable other one (node 2).
        let mut expected = Buffer::with_lines([
            "┌ draft tree · step 3 ───────────────────────┐",
            "│tree nodes 40 · accepted 4                  │",
            "│verify 9.0 ms · draft 3.0 ms                │",
            "│● t0  +1                                    │",
            "│  t1  +2                                    │",
            "│    t4  +2                                  │",
            "│      t13                                   │",
            "│        t40 → end                           │",
            "│  t2  +3                                    │",
            "│showing 5 of 40 nodes (+k: hidden children) │",
            "│                                            │",
            "└────────────────────────────────────────────┘",
        ]);
        let st = styles();
        frame(&mut expected, 21);
        let e = &mut expected;
        paint(e, 0, 1, 5, st.title);
        paint(e, 5, 1, 21, st.node); // "nodes 40 · accepted 4"
        paint(e, 0, 2, 28, st.dim);
        paint(e, 0, 3, 4, st.root); // "● t0"
        paint(e, 4, 3, 4, st.dim); // "  +1"
        paint(e, 0, 4, 2, st.dim);
        paint(e, 2, 4, 2, st.accepted); // "t1"
        paint(e, 4, 4, 4, st.dim);
        paint(e, 0, 5, 4, st.dim);
        paint(e, 4, 5, 2, st.accepted); // "t4"
        paint(e, 6, 5, 4, st.dim);
        paint(e, 0, 6, 6, st.dim);
        paint(e, 6, 6, 3, st.accepted); // "t13"
        paint(e, 0, 7, 8, st.dim);
        paint(e, 8, 7, 3, st.accepted); // "t40"
        paint(e, 11, 7, 3, st.dim); // " → "
        paint(e, 14, 7, 3, st.next); // "end"
        paint(e, 0, 8, 2, st.dim);
        paint(e, 2, 8, 2, st.node); // "t2"
        paint(e, 4, 8, 4, st.dim);
        paint(e, 0, 9, 43, st.dim);
        assert_eq!(buf, expected);
    }

    #[test]
    fn before_the_first_step_and_in_ar() {
        let buf = render(
            TreePanel {
                step: None,
                styles: styles(),
            },
            44,
            3,
        );
        let mut expected = Buffer::with_lines([
            "┌ draft tree ──────────────────────────────┐",
            "│the last step's draft tree appears here   │",
            "└──────────────────────────────────────────┘",
        ]);
        frame(&mut expected, 12);
        paint(&mut expected, 0, 1, 39, styles().placeholder);
        assert_eq!(buf, expected);

        let mut ar = step(TreeView {
            labels: vec!["x".into()],
            parents: vec![None],
            depths: vec![0],
            accepted: vec![0],
            next: " y".into(),
        });
        ar.mode = Mode::Ar;
        let panel = TreePanel {
            step: Some(&ar),
            styles: styles(),
        };
        let text: Vec<String> = panel.lines(10).iter().map(Line::to_string).collect();
        assert_eq!(
            text,
            [
                "ar nodes 0 · accepted 0",
                "verify 9.0 ms · draft 3.0 ms",
                "ar: one target token per step, nothing drafted",
                "next ·y"
            ]
        );
    }

    #[test]
    fn labels_show_whitespace_and_are_cut() {
        assert_eq!(tree_label(" a\tb\n"), "·a⇥b⏎");
        assert_eq!(tree_label(""), "∅");
        assert_eq!(tree_label("\u{7}"), "�");
        assert_eq!(tree_label(&"x".repeat(30)), format!("{}…", "x".repeat(17)));
    }
}
