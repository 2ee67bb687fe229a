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
