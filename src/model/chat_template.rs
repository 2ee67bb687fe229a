//! Chat templates: the model's own Jinja template (GGUF `tokenizer.chat_template` or
//! `tokenizer_config.json`), rendered with minijinja the way Hugging Face's `apply_chat_template`
//! renders it (trim_blocks, lstrip_blocks, Python string methods).

use crate::error::{Error, Result};
use minijinja::{context, Environment, ErrorKind};
use serde::{Deserialize, Serialize};

/// ChatML, used when a model ships no template.
pub const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl ChatMessage {
    /// A message.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compile `source`; `bos` and `eos` fill the template's `bos_token` / `eos_token`.
    pub fn new(source: &str, bos: Option<&str>, eos: Option<&str>) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", |fmt: String| -> String {
            // Templates use it for "today's date" lines; a fixed format keeps output reproducible.
            let _ = fmt;
            String::new()
        });
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::Template(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            bos: bos.unwrap_or("").to_string(),
            eos: eos.unwrap_or("").to_string(),
        })
    }

    /// Render a conversation; with `add_generation_prompt` the text ends where the assistant's
    /// next answer begins.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_thinking(messages, add_generation_prompt, None)
    }

    /// [`ChatTemplate::render`] with the template's `enable_thinking` switch (Qwen3's and
    /// Qwen3.5's templates) set, or left undefined (`None`: the template's own default).
    pub fn render_thinking(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        thinking: Option<bool>,
    ) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(e.to_string()))?;
        let base = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        };
        let ctx = match thinking {
            Some(on) => context! { enable_thinking => on, ..base },
            None => base,
        };
        tmpl.render(ctx).map_err(|e| Error::Template(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The switch as Qwen3's template reads it: an empty reasoning block when thinking is off.
    const QWEN3_LIKE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}";

    #[test]
    fn enable_thinking_reaches_the_template_only_when_set() {
        let t = ChatTemplate::new(QWEN3_LIKE, None, None).unwrap();
        let msgs = [ChatMessage::new(Role::User, "hi")];
        let open = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(t.render(&msgs, true).unwrap(), open);
        assert_eq!(t.render_thinking(&msgs, true, Some(true)).unwrap(), open);
        let off = t.render_thinking(&msgs, true, Some(false)).unwrap();
        assert_eq!(off, format!("{open}<think>\n\n</think>\n\n"));
    }
}
