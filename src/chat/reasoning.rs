//! A thinking model's answer in two parts: the reasoning between `<think>` and `</think>` (shown
//! dimmed and folded, left out of the history as the models' templates expect) and the answer.
//! The markers are single tokens in the vocabularies that have them (Qwen3, Qwen3.5, DeepSeek-R1
//! distills); some templates open the block in the prompt itself, so the answer starts inside.

use crate::model::tokenizer::TextTokenizer;

/// The text that opens a reasoning block.
pub const OPEN: &str = "<think>";
/// The text that closes it.
pub const CLOSE: &str = "</think>";

/// What one emitted token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `<think>` or `</think>`: shown as nothing.
    Marker,
    /// Part of the reasoning.
    Reasoning,
    /// Part of the answer.
    Answer,
}

/// Follows one answer's tokens through its reasoning block.
#[derive(Debug, Clone)]
pub struct ReasoningSplit {
    open: u32,
    close: u32,
    inside: bool,
    /// Whether answer text has been shown yet (the blank lines after `</think>` are not).
    answered: bool,
}

impl ReasoningSplit {
    /// A split for a tokenizer whose vocabulary has both markers; `None` for other models.
    pub fn new(tokenizer: &TextTokenizer) -> Option<Self> {
        Some(ReasoningSplit {
            open: tokenizer.token_id(OPEN)?,
            close: tokenizer.token_id(CLOSE)?,
            inside: false,
            answered: false,
        })
    }

    /// Start an answer whose rendered prompt is `prompt`: inside the block where the template
    /// opened it (the prompt ends in `<think>`).
    pub fn start(&mut self, prompt: &str) {
        self.inside = prompt.trim_end().ends_with(OPEN);
        self.answered = false;
    }

    /// Whether the answer is in its reasoning block now.
    pub fn inside(&self) -> bool {
        self.inside
    }

    /// What the token `id` is, moving through the block.
    pub fn part(&mut self, id: u32) -> Part {
        if id == self.open {
            self.inside = true;
            Part::Marker
        } else if id == self.close {
            self.inside = false;
            Part::Marker
        } else if self.inside {
            Part::Reasoning
        } else {
            Part::Answer
        }
    }

    /// The answer's text as shown: the whitespace between the block and the answer dropped.
    pub fn answer_text(&mut self, text: String) -> String {
        if self.answered {
            return text;
        }
        let kept = text.trim_start();
        self.answered = !kept.is_empty();
        kept.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split() -> ReasoningSplit {
        ReasoningSplit {
            open: 1,
            close: 2,
            inside: false,
            answered: false,
        }
    }

    #[test]
    fn the_block_is_followed_whether_the_answer_or_the_prompt_opens_it() {
        let mut s = split();
        s.start("<|im_start|>assistant\n");
        let parts: Vec<Part> = [1, 7, 8, 2, 9].iter().map(|&t| s.part(t)).collect();
        use Part::*;
        assert_eq!(parts, [Marker, Reasoning, Reasoning, Marker, Answer]);
        s.start("<|im_start|>assistant\n<think>\n");
        assert!(s.inside());
        assert_eq!(s.part(7), Reasoning);
        assert_eq!(s.part(2), Marker);
        assert_eq!(s.part(9), Answer);
    }

    #[test]
    fn blank_lines_before_the_answer_are_dropped_and_none_after() {
        let mut s = split();
        s.start("");
        assert_eq!(s.answer_text("\n\n".into()), "");
        assert_eq!(s.answer_text(" Hello".into()), "Hello");
        assert_eq!(s.answer_text("\n\nworld".into()), "\n\nworld");
    }
}
