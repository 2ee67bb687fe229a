//! The message editor: multi-line text with a cursor, and the history of sent messages.

/// A multi-line text box. The cursor is a char index into the text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputBox {
    text: String,
    cursor: usize,
}

impl InputBox {
    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Replace the text, cursor at the end.
    pub fn set(&mut self, text: &str) {
        self.text = text.to_string();
        self.cursor = self.text.chars().count();
    }

    /// Empty it, returning what it held.
    pub fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }

    fn byte(&self, char_idx: usize) -> usize {
        self.text
            .char_indices()
            .nth(char_idx)
            .map_or(self.text.len(), |(b, _)| b)
    }

    /// Insert a character at the cursor.
    pub fn insert(&mut self, c: char) {
        let b = self.byte(self.cursor);
        self.text.insert(b, c);
        self.cursor += 1;
    }

    /// Insert text at the cursor (pasted text keeps its newlines; `\r\n` becomes `\n`).
    pub fn insert_str(&mut self, s: &str) {
        let s = s.replace("\r\n", "\n").replace('\r', "\n");
        let b = self.byte(self.cursor);
        self.text.insert_str(b, &s);
        self.cursor += s.chars().count();
    }

    /// Delete the character before the cursor.
    pub fn backspace(&mut self) {
        if self.cursor == 0 {
            return;
        }
        self.cursor -= 1;
        let b = self.byte(self.cursor);
        self.text.remove(b);
    }

    /// Delete the character under the cursor.
    pub fn delete(&mut self) {
        if self.cursor < self.text.chars().count() {
            let b = self.byte(self.cursor);
            self.text.remove(b);
        }
    }

    /// Delete the word before the cursor.
    pub fn delete_word(&mut self) {
        let chars: Vec<char> = self.text.chars().collect();
        let mut i = self.cursor;
        while i > 0 && chars[i - 1].is_whitespace() {
            i -= 1;
        }
        while i > 0 && !chars[i - 1].is_whitespace() {
            i -= 1;
        }
        let (a, b) = (self.byte(i), self.byte(self.cursor));
        self.text.replace_range(a..b, "");
        self.cursor = i;
    }

    /// Move left.
    pub fn left(&mut self) {
        self.cursor = self.cursor.saturating_sub(1);
    }

    /// Move right.
    pub fn right(&mut self) {
        self.cursor = (self.cursor + 1).min(self.text.chars().count());
    }

    /// True when the cursor is after the last character.
    pub fn at_end(&self) -> bool {
        self.cursor >= self.text.chars().count()
    }

    /// (line, column) of the cursor, in chars.
    pub fn cursor_pos(&self) -> (usize, usize) {
        let before: String = self.text.chars().take(self.cursor).collect();
        let line = before.matches('\n').count();
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
        (line, col)
    }

    fn line_starts(&self) -> Vec<usize> {
        let mut starts = vec![0];
        for (i, c) in self.text.chars().enumerate() {
            if c == '\n' {
                starts.push(i + 1);
            }
        }
        starts
    }

    fn line_len(&self, line: usize) -> usize {
        self.text
            .split('\n')
            .nth(line)
            .map_or(0, |l| l.chars().count())
    }

    /// Start of the line.
    pub fn home(&mut self) {
        let (line, _) = self.cursor_pos();
        self.cursor = self.line_starts()[line];
    }

    /// End of the line.
    pub fn end(&mut self) {
        let (line, _) = self.cursor_pos();
        self.cursor = self.line_starts()[line] + self.line_len(line);
    }

    /// Move up a line; false when already on the first line.
    pub fn up(&mut self) -> bool {
        let (line, col) = self.cursor_pos();
        if line == 0 {
            return false;
        }
        self.cursor = self.line_starts()[line - 1] + col.min(self.line_len(line - 1));
        true
    }

    /// Move down a line; false when already on the last line.
    pub fn down(&mut self) -> bool {
        let (line, col) = self.cursor_pos();
        let starts = self.line_starts();
        if line + 1 >= starts.len() {
            return false;
        }
        self.cursor = starts[line + 1] + col.min(self.line_len(line + 1));
        true
    }

    /// Number of lines.
    pub fn lines(&self) -> usize {
        self.text.matches('\n').count() + 1
    }
}

/// Sent messages, browsable with Up and Down.
#[derive(Debug, Clone, Default)]
pub struct History {
    items: Vec<String>,
    pos: Option<usize>,
    draft: String,
}

impl History {
    /// Remember a sent message.
    pub fn push(&mut self, s: &str) {
        if !s.trim().is_empty() && self.items.last().map(String::as_str) != Some(s) {
            self.items.push(s.to_string());
        }
        self.pos = None;
    }

    /// The previous message (saving `current` as the draft when leaving it).
    pub fn older(&mut self, current: &str) -> Option<&str> {
        let next = match self.pos {
            None if self.items.is_empty() => return None,
            None => {
                self.draft = current.to_string();
                self.items.len() - 1
            }
            Some(0) => 0,
            Some(p) => p - 1,
        };
        self.pos = Some(next);
        self.items.get(next).map(String::as_str)
    }

    /// The next message, or the draft after the newest.
    pub fn newer(&mut self) -> Option<&str> {
        match self.pos {
            None => None,
            Some(p) if p + 1 < self.items.len() => {
                self.pos = Some(p + 1);
                self.items.get(p + 1).map(String::as_str)
            }
            Some(_) => {
                self.pos = None;
                Some(self.draft.as_str())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(text: &str) -> InputBox {
        let mut b = InputBox::default();
        b.set(text);
        b
    }

    #[test]
    fn editing_at_the_cursor_with_multibyte_text() {
        let mut b = boxed("héllo");
        assert!(b.at_end());
        b.left();
        b.left();
        b.insert('✓');
        assert_eq!(b.text(), "hél✓lo");
        assert!(!b.at_end());
        b.backspace();
        b.backspace();
        assert_eq!(b.text(), "hélo");
        b.delete();
        assert_eq!(b.text(), "héo");
        b.home();
        b.backspace();
        assert_eq!(b.text(), "héo", "backspace at the start does nothing");
        b.end();
        b.delete();
        assert_eq!(b.text(), "héo", "delete at the end does nothing");
        b.insert_str("🙂 ok");
        assert_eq!(b.text(), "héo🙂 ok");
        assert_eq!(b.cursor_pos(), (0, 7));
    }

    #[test]
    fn left_and_right_stop_at_the_ends() {
        let mut b = boxed("ab");
        b.right();
        assert_eq!(b.cursor_pos(), (0, 2));
        for _ in 0..5 {
            b.left();
        }
        assert_eq!(b.cursor_pos(), (0, 0));
        b.right();
        assert_eq!(b.cursor_pos(), (0, 1));
    }

    #[test]
    fn pasted_line_ends_become_newlines() {
        let mut b = InputBox::default();
        b.insert_str("one\r\ntwo\rthree\n");
        assert_eq!(b.text(), "one\ntwo\nthree\n");
        assert_eq!(b.lines(), 4);
        assert_eq!(b.cursor_pos(), (3, 0));
    }

    #[test]
    fn up_and_down_keep_the_column_where_they_can() {
        let mut b = boxed("abcd\nx\nefghij");
        assert_eq!(b.cursor_pos(), (2, 6));
        assert!(b.up());
        assert_eq!(b.cursor_pos(), (1, 1), "clamped to the short line");
        assert!(b.up());
        assert_eq!(b.cursor_pos(), (0, 1));
        assert!(!b.up(), "already on the first line");
        b.end();
        assert_eq!(b.cursor_pos(), (0, 4));
        assert!(b.down());
        assert_eq!(b.cursor_pos(), (1, 1));
        assert!(b.down());
        assert_eq!(b.cursor_pos(), (2, 1));
        assert!(!b.down(), "already on the last line");
        b.home();
        assert_eq!(b.cursor_pos(), (2, 0));
        b.insert('>');
        assert_eq!(b.text(), "abcd\nx\n>efghij");
        // Left from the start of a line goes to the end of the one above.
        b.left();
        b.left();
        assert_eq!(b.cursor_pos(), (1, 1));
    }

    #[test]
    fn delete_word_takes_the_word_and_the_spaces_after_it() {
        let mut b = boxed("say hello  world  ");
        b.delete_word();
        assert_eq!(b.text(), "say hello  ");
        b.delete_word();
        assert_eq!(b.text(), "say ");
        b.home();
        b.delete_word();
        assert_eq!(b.text(), "say ", "nothing before the cursor");
        b.end();
        b.delete_word();
        b.delete_word();
        assert!(b.is_empty());
    }

    #[test]
    fn take_empties_and_resets_the_cursor() {
        let mut b = boxed("line\nmore");
        assert_eq!(b.take(), "line\nmore");
        assert!(b.is_empty() && b.at_end());
        assert_eq!(b.cursor_pos(), (0, 0));
        b.insert('x');
        assert_eq!(b.text(), "x");
    }

    #[test]
    fn history_keeps_the_draft_and_skips_repeats() {
        let mut h = History::default();
        assert_eq!(h.older("draft"), None);
        h.push("one");
        h.push("two");
        h.push("two");
        h.push("   ");
        assert_eq!(h.older("draft"), Some("two"));
        assert_eq!(h.older("two"), Some("one"));
        assert_eq!(h.older("one"), Some("one"), "stays at the oldest");
        assert_eq!(h.newer(), Some("two"));
        assert_eq!(h.newer(), Some("draft"), "back to what was being typed");
        assert_eq!(h.newer(), None);
        h.push("three");
        assert_eq!(h.older(""), Some("three"));
    }
}
