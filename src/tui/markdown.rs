//! Markdown in the chat: what each character of an answer is (a mark, code, a heading, strong or
//! emphasised text), so that the transcript can lay those looks over the colours of the tokens'
//! origins without moving a character. A line-based subset of CommonMark that reads partial text
//! as it streams: fenced code blocks (```` ``` ```` or `~~~`; an unclosed one runs to the end),
//! ATX headings, block quotes, code spans, strong (`**`, `__`) and emphasis (`*`). The marks stay
//! on screen, dimmed, so that what a terminal selection copies is the answer as written.

/// What Markdown makes of one character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Look {
    /// A mark: a fence, `#`, `>`, backticks, `**` (shown dimmed).
    pub markup: bool,
    /// Inside a code block or a code span.
    pub code: bool,
    /// In a heading.
    pub heading: bool,
    /// Strong (`**text**`).
    pub strong: bool,
    /// Emphasised (`*text*`).
    pub emphasis: bool,
}

/// A fence line (up to three spaces, then three or more of `` ` `` or `~`): its character, its
/// length and whether text follows it (an info string: a fence with one only opens a block).
pub fn fence(line: &str) -> Option<(char, usize, bool)> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return None;
    }
    let c = rest.chars().next().filter(|&c| c == '`' || c == '~')?;
    let n = rest.chars().take_while(|&x| x == c).count();
    let info = &rest[n..];
    // A backtick fence's info string holds no backtick (else it is a code span).
    if n < 3 || (c == '`' && info.contains('`')) {
        return None;
    }
    Some((c, n, !info.trim().is_empty()))
}

/// The code blocks of `text`, each without its fences; an unclosed last block (an answer cut
/// short) runs to the end.
pub fn code_blocks(text: &str) -> Vec<String> {
    let mut blocks = vec![];
    let mut open: Option<((char, usize), Vec<&str>)> = None;
    for line in text.lines() {
        match (open.take(), fence(line)) {
            (None, Some((c, n, _))) => open = Some(((c, n), vec![])),
            (None, None) => {}
            (Some((f, lines)), Some((c, n, false))) if c == f.0 && n >= f.1 => {
                blocks.push(lines.join("\n"))
            }
            (Some((f, mut lines)), _) => {
                lines.push(line);
                open = Some((f, lines));
            }
        }
    }
    if let Some((_, lines)) = open {
        blocks.push(lines.join("\n"));
    }
    blocks
}

/// Per character of `text` (in `chars()` order), its look.
pub fn looks(text: &str) -> Vec<Look> {
    let mut out = Vec::with_capacity(text.len());
    let mut open: Option<(char, usize)> = None;
    let mark = Look {
        markup: true,
        ..Look::default()
    };
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push(Look::default()); // the newline
        }
        let chars: Vec<char> = line.chars().collect();
        let n = chars.len();
        match (open, fence(line)) {
            (None, Some((c, len, _))) => {
                open = Some((c, len));
                out.extend(std::iter::repeat_n(mark, n));
            }
            (Some((c, len)), Some((c2, len2, false))) if c == c2 && len2 >= len => {
                open = None;
                out.extend(std::iter::repeat_n(mark, n));
            }
            (Some(_), _) => out.extend(std::iter::repeat_n(
                Look {
                    code: true,
                    ..Look::default()
                },
                n,
            )),
            (None, None) => {
                let mut line_looks = vec![Look::default(); n];
                block_marks(&chars, &mut line_looks);
                out.extend(line_looks);
            }
        }
    }
    out
}

/// A line outside code blocks: its heading or quote marks, then the inline marks of the rest.
fn block_marks(c: &[char], looks: &mut [Look]) {
    let mut i = c.iter().take(3).take_while(|&&x| x == ' ').count();
    while i < c.len() && c[i] == '>' {
        looks[i].markup = true;
        i += 1;
        if c.get(i) == Some(&' ') {
            i += 1;
        }
    }
    let hashes = c[i..].iter().take_while(|&&x| x == '#').count();
    if (1..=6).contains(&hashes) && c.get(i + hashes).is_none_or(|&x| x == ' ') {
        for l in &mut looks[i..] {
            l.heading = true;
        }
        for l in &mut looks[i..i + hashes] {
            l.markup = true;
        }
        i += hashes;
    }
    inline_marks(c, looks, i, c.len());
}

/// Code spans, strong and emphasis within `c[from..to]`.
fn inline_marks(c: &[char], looks: &mut [Look], from: usize, to: usize) {
    let run = |i: usize, x: char| c[i..to].iter().take_while(|&&y| y == x).count();
    let mut i = from;
    while i < to {
        match c[i] {
            '`' => {
                let n = run(i, '`');
                // The closing run: exactly as many backticks.
                let mut j = i + n;
                let close = loop {
                    if j >= to {
                        break None;
                    }
                    let m = run(j, '`');
                    if m == n {
                        break Some(j);
                    }
                    j += m.max(1);
                };
                let Some(j) = close else {
                    i += n;
                    continue;
                };
                for (k, l) in looks.iter_mut().enumerate().take(j + n).skip(i) {
                    l.code = true;
                    l.markup = k < i + n || k >= j;
                }
                i = j + n;
            }
            // (`__` inside a word is no mark: snake__case.)
            '_' if i > 0 && c[i - 1].is_alphanumeric() => i += 1,
            x @ ('*' | '_') if i + 1 < to && c[i + 1] == x => {
                match closing(c, i + 2, to, &[x, x]) {
                    Some(j) => {
                        mark_span(looks, i, j, 2, |l| l.strong = true);
                        inline_marks(c, looks, i + 2, j);
                        i = j + 2;
                    }
                    None => i += run(i, x),
                }
            }
            '*' => match closing(c, i + 1, to, &['*']) {
                Some(j) => {
                    mark_span(looks, i, j, 1, |l| l.emphasis = true);
                    inline_marks(c, looks, i + 1, j);
                    i = j + 1;
                }
                None => i += 1,
            },
            _ => i += 1,
        }
    }
}

/// Where the span opened just before `from` by `marks` closes within `c[..to]`: text that does not
/// start or end with a space, then `marks` (for a single `*`, not part of a `**`).
fn closing(c: &[char], from: usize, to: usize, marks: &[char]) -> Option<usize> {
    let k = marks.len();
    if from >= to || c[from].is_whitespace() {
        return None;
    }
    (from + 1..=to.checked_sub(k)?).find(|&j| {
        c[j..j + k] == *marks
            && !c[j - 1].is_whitespace()
            && (k == 2 || (c.get(j + 1) != Some(&marks[0]) && c[j - 1] != marks[0]))
    })
}

/// Marks `c[open..open + k]` and `c[close..close + k]` as markup and applies `set` to all of it.
fn mark_span(looks: &mut [Look], open: usize, close: usize, k: usize, set: impl Fn(&mut Look)) {
    for (i, l) in looks.iter_mut().enumerate().take(close + k).skip(open) {
        set(l);
        if i < open + k || i >= close {
            l.markup = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text`'s looks as one letter a character: m markup, c code, h heading, s strong,
    /// e emphasis, . plain (the first that applies).
    fn show(text: &str) -> String {
        looks(text)
            .iter()
            .map(|l| match l {
                l if l.markup => 'm',
                l if l.code => 'c',
                l if l.heading => 'h',
                l if l.strong => 's',
                l if l.emphasis => 'e',
                _ => '.',
            })
            .collect()
    }

    #[test]
    fn code_blocks_and_their_fences() {
        let text = "a\n```rs\nx*y*\n```\nb";
        assert_eq!(looks(text).len(), text.chars().count());
        assert_eq!(show(text), ". mmmmm cccc mmm .".replace(' ', "."));
        // Unclosed: the rest is code; a fence with an info string does not close.
        assert_eq!(show("```\nx\n```py\ny"), "mmm.c.ccccc.c");
        // Tildes close only tildes, and only as many or more.
        assert_eq!(show("~~~~\n~~~\n~~~~~\nz"), "mmmm.ccc.mmmmm..");
    }

    #[test]
    fn headings_quotes_and_inline_marks() {
        assert_eq!(show("## Title"), "mmhhhhhh");
        assert_eq!(show("#no"), "...");
        assert_eq!(show("> q"), "m..");
        assert_eq!(show("a `b` c"), "..mcm..");
        assert_eq!(show("``a`b``"), "mmcccmm");
        assert_eq!(show("a **b c** d"), "..mmsssmm..");
        assert_eq!(show("an *em* x"), "...meem..");
        assert_eq!(show("**`x`**"), "mmmcmmm");
    }

    #[test]
    fn what_is_not_markdown_stays_plain() {
        for text in [
            "2 * 3 * 4",
            "snake_case_name",
            "foo__bar__baz",
            "* a list item",
            "an ` unclosed span",
            "**unclosed strong",
            "a ** b ** c",
            "    ```indented four: not a fence",
        ] {
            assert!(
                looks(text).iter().all(|l| *l == Look::default()),
                "{text}: {}",
                show(text)
            );
        }
    }

    #[test]
    fn the_code_blocks_of_an_answer() {
        let text = "Try:\n```python\nprint(1)\n```\nor\n~~~\nfn main() {}\n```\nlet x = 1;";
        assert_eq!(
            code_blocks(text),
            ["print(1)", "fn main() {}\n```\nlet x = 1;"]
        );
        assert_eq!(code_blocks("cut short:\n```\nshort"), ["short"]);
        assert!(code_blocks("no code").is_empty());
    }
}
