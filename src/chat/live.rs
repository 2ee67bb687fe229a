//! The live chat engine: the real engine on its thread, with the tokenizer and chat template that
//! turn messages into ids and ids into display text.

use super::reasoning::{Part, ReasoningSplit};
use super::{ChatEngine, ChatEvent, EngineInfo, Origin, StepView, TokenPiece, TreeView};
use crate::engine::thread::{Command, EngineThread, Event};
use crate::engine::{Engine, Mode, Settings};
use crate::model::chat_template::{ChatMessage, ChatTemplate};
use crate::model::tokenizer::{StreamDecoder, TextTokenizer};

/// The real engine behind the chat UI.
pub struct LiveEngine {
    thread: EngineThread,
    tokenizer: TextTokenizer,
    template: ChatTemplate,
    info: EngineInfo,
    settings: Settings,
    stream: StreamDecoder,
    step: usize,
    /// A thinking model's reasoning block, followed through each answer.
    reasoning: Option<ReasoningSplit>,
    thinking: Option<bool>,
}

impl LiveEngine {
    /// Start the engine thread.
    pub fn new(
        engine: Engine,
        tokenizer: TextTokenizer,
        template: ChatTemplate,
        mut info: EngineInfo,
    ) -> Self {
        info.unavailable = Mode::ALL
            .into_iter()
            .filter_map(|m| engine.mode_unavailable(m).map(|why| (m, why)))
            .collect();
        info.context = engine.target().context();
        let reasoning = ReasoningSplit::new(&tokenizer);
        info.thinks = reasoning.is_some();
        let settings = *engine.settings();
        LiveEngine {
            thread: EngineThread::spawn(engine),
            tokenizer,
            template,
            info,
            settings,
            stream: StreamDecoder::new(),
            step: 0,
            reasoning,
            thinking: None,
        }
    }

    fn label(&self, id: u32) -> String {
        self.tokenizer.token_text(id)
    }

    fn view(&mut self, ev: crate::engine::StepEvent) -> StepView {
        self.step += 1;
        let origins = ev.origins();
        let mut pieces = Vec::with_capacity(ev.emitted.len());
        for (i, &t) in ev.emitted.iter().enumerate() {
            let part = self.reasoning.as_mut().map_or(Part::Answer, |r| r.part(t));
            if part == Part::Marker {
                continue;
            }
            let mut text = self
                .stream
                .push(&self.tokenizer, t)
                .ok()
                .flatten()
                .unwrap_or_default();
            if let (Part::Answer, Some(r)) = (part, self.reasoning.as_mut()) {
                text = r.answer_text(text);
            }
            let origin = match origins.get(i).copied().flatten() {
                Some(depth) => Origin::Drafted { depth },
                None if ev.mode == Mode::Ar => Origin::Plain,
                None => Origin::Target,
            };
            pieces.push(TokenPiece {
                text,
                origin,
                step: self.step,
                reasoning: part == Part::Reasoning,
            });
        }
        let next = self.label(ev.next);
        let tree = TreeView {
            labels: ev.tree.tokens.iter().map(|&t| self.label(t)).collect(),
            parents: ev.tree.parents.clone(),
            depths: ev.tree.depths.clone(),
            accepted: ev.accepted.clone(),
            next,
        };
        StepView {
            step: self.step,
            mode: ev.mode,
            pieces,
            tree,
            times: ev.times,
        }
    }
}

impl ChatEngine for LiveEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn settings(&self) -> Settings {
        self.settings
    }

    fn generate(&mut self, messages: &[ChatMessage], max_tokens: usize) -> crate::Result<()> {
        let text = self
            .template
            .render_thinking(messages, true, self.thinking)?;
        let prompt = self.tokenizer.encode(&text, true)?;
        if prompt.len() >= self.info.context {
            return Err(crate::Error::ContextOverflow {
                prompt: prompt.len(),
                context: self.info.context,
            });
        }
        self.stream = StreamDecoder::new();
        self.step = 0;
        if let Some(r) = self.reasoning.as_mut() {
            r.start(&text);
        }
        self.thread.send(Command::Generate { prompt, max_tokens });
        Ok(())
    }

    fn stop(&mut self) {
        self.thread.send(Command::Stop);
    }

    fn apply(&mut self, settings: Settings) {
        self.thread.send(Command::Settings(settings));
    }

    fn set_thinking(&mut self, thinking: Option<bool>) {
        self.thinking = thinking;
    }

    fn poll(&mut self) -> Vec<ChatEvent> {
        let mut out = vec![];
        while let Some(ev) = self.thread.try_recv() {
            out.push(match ev {
                Event::Started(s) => ChatEvent::Started(s),
                Event::Step(s) => ChatEvent::Step(self.view(s)),
                // Text held back at the end (an incomplete character) is dropped: the tokenizer
                // could not make a character of it either.
                Event::Finished(f) => ChatEvent::Finished(f),
                Event::SettingsApplied(s) => {
                    self.settings = s;
                    ChatEvent::SettingsApplied(s)
                }
                Event::Error(e) => ChatEvent::Error(e),
            });
        }
        out
    }
}
