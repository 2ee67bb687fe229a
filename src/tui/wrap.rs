//! Word wrapping of styled text into lines of a given width (in terminal cells).

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// Wrap styled pieces into lines of at most `width` cells. Newlines in the text start new lines;
/// lines break after whitespace where they can, inside a word only when it is longer than a line.
/// Every line gets `indent` leading spaces (counted in the width).
pub fn wrap(pieces: &[(&str, Style)], width: usize, indent: usize) -> Vec<Line<'static>> {
    let width = width.max(indent + 1);
    let mut out = vec![];
    let mut para: Vec<(char, Style)> = vec![];
    let flush = |para: &mut Vec<(char, Style)>, out: &mut Vec<Line<'static>>| {
        for line in wrap_paragraph(para, width - indent) {
            out.push(to_line(&line, indent));
        }
        para.clear();
    };
    for (text, style) in pieces {
        for c in text.chars() {
            if c == '\n' {
                flush(&mut para, &mut out);
            } else if c == '\t' {
                para.extend(std::iter::repeat_n((' ', *style), 4));
            } else if !c.is_control() {
                para.push((c, *style));
            }
        }
    }
    flush(&mut para, &mut out);
    out
}

fn cw(c: char) -> usize {
    c.width().unwrap_or(0)
}

fn wrap_paragraph(chars: &[(char, Style)], width: usize) -> Vec<Vec<(char, Style)>> {
    if chars.is_empty() {
        return vec![vec![]];
    }
    let mut lines = vec![];
    let mut line: Vec<(char, Style)> = vec![];
    let mut line_w = 0;
    let mut i = 0;
    while i < chars.len() {
        // A word: non-space characters, then the spaces after them.
        let start = i;
        while i < chars.len() && !chars[i].0.is_whitespace() {
            i += 1;
        }
        while i < chars.len() && chars[i].0.is_whitespace() {
            i += 1;
        }
        let word = &chars[start..i];
        let word_w: usize = word.iter().map(|(c, _)| cw(*c)).sum();
        let text_w: usize = word
            .iter()
            .take_while(|(c, _)| !c.is_whitespace())
            .map(|(c, _)| cw(*c))
            .sum();
        if line_w + text_w <= width {
            line.extend_from_slice(word);
            line_w += word_w;
            continue;
        }
        if text_w <= width && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
            line.extend_from_slice(word);
            line_w = word_w;
            continue;
        }
        // Longer than a line: break it where it overflows.
        for &(c, s) in word {
            if line_w + cw(c) > width && !line.is_empty() {
                lines.push(std::mem::take(&mut line));
                line_w = 0;
            }
            line.push((c, s));
            line_w += cw(c);
        }
    }
    lines.push(line);
    // Trailing spaces may run past the width; they are invisible, so trim them.
    for l in &mut lines {
        let mut w: usize = l.iter().map(|(c, _)| cw(*c)).sum();
        while w > width {
            match l.last() {
                Some((c, _)) if c.is_whitespace() => {
                    w -= cw(*c);
                    l.pop();
                }
                _ => break,
            }
        }
    }
    lines
}

fn to_line(chars: &[(char, Style)], indent: usize) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = vec![];
    if indent > 0 {
        spans.push(Span::raw(" ".repeat(indent)));
    }
    let mut cur = String::new();
    let mut cur_style: Option<Style> = None;
    for &(c, s) in chars {
        if cur_style != Some(s) {
            if let Some(st) = cur_style {
                spans.push(Span::styled(std::mem::take(&mut cur), st));
            }
            cur_style = Some(s);
        }
        cur.push(c);
    }
    if let Some(st) = cur_style {
        spans.push(Span::styled(cur, st));
    }
    Line::from(spans)
}

/// Display width of a string.
pub fn width(s: &str) -> usize {
    s.chars().map(cw).sum()
}

/// Cut a string to at most `max` cells, with an ellipsis when cut.
pub fn truncate(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_string();
    }
    let mut out = String::new();
    let mut w = 0;
    for c in s.chars() {
        if w + cw(c) + 1 > max {
            break;
        }
        out.push(c);
        w += cw(c);
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::{Color, Modifier};

    fn text(lines: &[Line]) -> Vec<String> {
        lines.iter().map(Line::to_string).collect()
    }

    fn plain(s: &str, width: usize) -> Vec<String> {
        text(&wrap(&[(s, Style::default())], width, 0))
    }

    #[test]
    fn breaks_after_spaces() {
        assert_eq!(plain("hello world foo", 11), ["hello world", "foo"]);
        assert_eq!(plain("hello world foo", 20), ["hello world foo"]);
        // The space at a break stays at the end of the line it ends (it is invisible).
        assert_eq!(plain("aaa bbb", 4), ["aaa ", "bbb"]);
        // Trailing spaces past the width are dropped.
        assert_eq!(plain("aaa      bbb", 4), ["aaa ", "bbb"]);
    }

    #[test]
    fn long_words_break_where_they_overflow() {
        assert_eq!(plain("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        // A word longer than a line fills the line it starts on, then goes on below.
        assert_eq!(plain("ab abcdefghij", 4), ["ab a", "bcde", "fghi", "j"]);
        assert_eq!(
            plain("see https://example.com/a/long/path ok", 12),
            ["see https://", "example.com/", "a/long/path ", "ok"]
        );
    }

    #[test]
    fn wide_characters_take_two_cells() {
        assert_eq!(width("日本語"), 6);
        assert_eq!(plain("日本語テキスト", 5), ["日本", "語テ", "キス", "ト"]);
        assert_eq!(plain("日本 語", 4), ["日本", "語"]);
        for line in wrap(&[("漢字かな交じり文 and ascii", Style::default())], 7, 0) {
            assert!(line.width() <= 7, "{line}");
        }
    }

    #[test]
    fn combining_characters_take_no_cell() {
        let cafe = "cafe\u{301}";
        assert_eq!(width(cafe), 4);
        assert_eq!(
            plain(&format!("{cafe} au lait"), 7),
            [format!("{cafe} au"), "lait".into()]
        );
        // A combining mark never starts a line of its own when its base fits.
        assert_eq!(
            plain("e\u{301}e\u{301}e\u{301}", 3),
            ["e\u{301}e\u{301}e\u{301}"]
        );
    }

    #[test]
    fn newlines_tabs_and_control_characters() {
        assert_eq!(plain("a\n\nb", 10), ["a", "", "b"]);
        assert_eq!(plain("", 10), [""]);
        assert_eq!(plain("a\tb", 10), ["a    b"]);
        assert_eq!(plain("a\u{7}b\rc", 10), ["abc"]);
    }

    #[test]
    fn indent_counts_in_the_width() {
        let lines = text(&wrap(&[("one two three", Style::default())], 8, 2));
        assert_eq!(lines, ["  one ", "  two ", "  three"]);
        // A width below the indent still makes progress, one cell a line.
        assert_eq!(
            text(&wrap(&[("ab", Style::default())], 1, 2)),
            ["  a", "  b"]
        );
    }

    #[test]
    fn styles_follow_their_characters_across_breaks() {
        let red = Style::default().fg(Color::Red);
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let lines = wrap(&[("Hello ", red), ("there friend", bold)], 12, 0);
        assert_eq!(text(&lines), ["Hello there ", "friend"]);
        let spans: Vec<(String, Style)> = lines[0]
            .spans
            .iter()
            .map(|s| (s.content.to_string(), s.style))
            .collect();
        assert_eq!(
            spans,
            [("Hello ".to_string(), red), ("there ".to_string(), bold)]
        );
        assert_eq!(lines[1].spans.len(), 1);
        assert_eq!(lines[1].spans[0].style, bold);
    }

    #[test]
    fn truncate_cuts_with_an_ellipsis() {
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("hello world", 6), "hello…");
        assert_eq!(truncate("日本語", 4), "日…");
        assert_eq!(truncate("日本語", 6), "日本語");
        assert_eq!(truncate("abc", 0), "…");
    }
}
