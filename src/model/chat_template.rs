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
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(e.to_string()))?;
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        })
        .map_err(|e| Error::Template(e.to_string()))
    }
}
