//! Text <-> token ids: a `tokenizers::Tokenizer` from `tokenizer.json` or rebuilt from GGUF
//! metadata, the stop tokens, and an incremental decoder for streaming.

use crate::arch::config::gguf_usize;
use crate::error::{Error, Result};
use candle_core::quantized::gguf_file;
use std::collections::BTreeSet;
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Markers that end an assistant turn in the chat formats treespec knows.
const END_MARKERS: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "</s>",
];

/// Qwen2's pre-tokenizer split (from its tokenizer.json).
const REGEX_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's pre-tokenizer split (GGUF `qwen35`): Qwen2's with combining marks counted as
/// letters (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN35`, from the model's tokenizer.json).
const REGEX_QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's pre-tokenizer split (GGUF `llama-bpe`).
const REGEX_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer with the facts generation needs around it.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    stop_ids: BTreeSet<u32>,
    bos: Option<(u32, String)>,
    eos: Option<(u32, String)>,
    add_bos: bool,
    vocab: Vec<String>,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab", &self.vocab.len())
            .field("stop_ids", &self.stop_ids)
            .finish()
    }
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

fn md_str<'a>(ct: &'a gguf_file::Content, key: &str) -> Option<&'a String> {
    ct.metadata.get(key).and_then(|v| v.to_string().ok())
}

fn md_u32(ct: &gguf_file::Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(gguf_usize).map(|v| v as u32)
}

impl TextTokenizer {
    /// Rebuild the tokenizer from GGUF metadata (byte-level BPE vocabularies, `tokenizer.ggml.model
    /// = gpt2`). The pre-tokenizer follows `tokenizer.ggml.pre`.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let model = md_str(ct, "tokenizer.ggml.model")
            .ok_or_else(|| tok_err("the GGUF file carries no tokenizer (tokenizer.ggml.model)"))?;
        if model != "gpt2" {
            return Err(tok_err(format!(
                "GGUF tokenizer model `{model}` is not supported (byte-level BPE `gpt2` is); \
                 pass a checkpoint directory with tokenizer.json instead"
            )));
        }
        let strings = |key: &str| -> Result<Vec<String>> {
            let arr = ct
                .metadata
                .get(key)
                .and_then(|v| v.to_vec().ok())
                .ok_or_else(|| tok_err(format!("GGUF metadata lacks `{key}`")))?;
            arr.iter()
                .map(|v| v.to_string().cloned().map_err(tok_err))
                .collect()
        };
        let vocab = strings("tokenizer.ggml.tokens")?;
        let merges: Vec<(String, String)> = strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| tok_err(format!("malformed merge `{m}`")))
            })
            .collect::<Result<_>>()?;
        let ids: Vocab = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(ids, merges)
            .build()
            .map_err(tok_err)?;
        let mut tk = Tokenizer::new(bpe);
        let pre = md_str(ct, "tokenizer.ggml.pre")
            .cloned()
            .unwrap_or_else(|| "gpt2".into());
        let split = |re: &str| -> Result<PreTokenizerWrapper> {
            let s = Split::new(
                SplitPattern::Regex(re.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(tok_err)?;
            Ok(Sequence::new(vec![s.into(), ByteLevel::new(false, false, false).into()]).into())
        };
        match pre.as_str() {
            "qwen2" => {
                tk.with_normalizer(Some(NFC)).map_err(tok_err)?;
                tk.with_pre_tokenizer(Some(split(REGEX_QWEN2)?));
            }
            "qwen35" => {
                tk.with_normalizer(Some(NFC)).map_err(tok_err)?;
                tk.with_pre_tokenizer(Some(split(REGEX_QWEN35)?));
            }
            "llama-bpe" | "llama3" | "smaug-bpe" => {
                tk.with_pre_tokenizer(Some(split(REGEX_LLAMA3)?));
            }
            "smollm" => {
                let seq = Sequence::new(vec![
                    Digits::new(true).into(),
                    ByteLevel::new(false, true, true).into(),
                ]);
                tk.with_pre_tokenizer(Some(seq));
            }
            "gpt2" | "default" => {
                tk.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
            }
            other => {
                return Err(tok_err(format!(
                    "GGUF pre-tokenizer `{other}` is not supported (qwen2, qwen35, llama-bpe, smollm, gpt2 \
                     are); pass a checkpoint directory with tokenizer.json instead"
                )))
            }
        }
        tk.with_decoder(Some(ByteLevelDecoder::default()));
        // Control and user-defined tokens are matched whole in text (so a rendered chat template
        // maps `<|im_start|>` to its id) and dropped when decoding for display.
        let types: Vec<usize> = ct
            .metadata
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.to_vec().ok())
            .map(|a| a.iter().map(|v| gguf_usize(v).unwrap_or(1)).collect())
            .unwrap_or_default();
        let specials: Vec<AddedToken> = types
            .iter()
            .enumerate()
            .filter(|(_, &t)| t == 3 || t == 4)
            .filter_map(|(i, _)| vocab.get(i))
            .map(|t| AddedToken::from(t.clone(), true))
            .collect();
        tk.add_special_tokens(specials).map_err(tok_err)?;
        let named = |key: &str| {
            md_u32(ct, key).and_then(|id| vocab.get(id as usize).map(|t| (id, t.clone())))
        };
        let bos = named("tokenizer.ggml.bos_token_id");
        let eos = named("tokenizer.ggml.eos_token_id");
        let add_bos = ct
            .metadata
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(false);
        Ok(Self::assemble(tk, vocab, bos, eos, add_bos, &[]))
    }

    /// Load `tokenizer.json` from a checkpoint directory, with `tokenizer_config.json` and
    /// `generation_config.json` beside it when present (special tokens, stop ids).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(tok_err(format!("{} not found", path.display())));
        }
        let tk =
            Tokenizer::from_file(&path).map_err(|e| tok_err(format!("{}: {e}", path.display())))?;
        let size = tk.get_vocab_size(true);
        let mut vocab = vec![String::new(); size];
        for (t, id) in tk.get_vocab(true) {
            if let Some(slot) = vocab.get_mut(id as usize) {
                *slot = t;
            }
        }
        let cfg = read_json(&dir.join("tokenizer_config.json"));
        let token_of = |key: &str| -> Option<(u32, String)> {
            let v = cfg.as_ref()?.get(key)?;
            let s = v
                .as_str()
                .or_else(|| v.get("content").and_then(|c| c.as_str()))?;
            tk.token_to_id(s).map(|id| (id, s.to_string()))
        };
        let bos = token_of("bos_token");
        let eos = token_of("eos_token");
        let add_bos = cfg
            .as_ref()
            .and_then(|c| c.get("add_bos_token"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let mut extra = vec![];
        if let Some(gen) = read_json(&dir.join("generation_config.json")) {
            match gen.get("eos_token_id") {
                Some(serde_json::Value::Number(n)) => extra.extend(n.as_u64().map(|x| x as u32)),
                Some(serde_json::Value::Array(a)) => {
                    extra.extend(a.iter().filter_map(|v| v.as_u64()).map(|x| x as u32))
                }
                _ => {}
            }
        }
        Ok(Self::assemble(tk, vocab, bos, eos, add_bos, &extra))
    }

    fn assemble(
        inner: Tokenizer,
        vocab: Vec<String>,
        bos: Option<(u32, String)>,
        eos: Option<(u32, String)>,
        add_bos: bool,
        extra_stops: &[u32],
    ) -> Self {
        let mut stop_ids: BTreeSet<u32> = extra_stops.iter().copied().collect();
        if let Some((id, _)) = &eos {
            stop_ids.insert(*id);
        }
        for m in END_MARKERS {
            if let Some(id) = inner.token_to_id(m) {
                stop_ids.insert(id);
            }
        }
        TextTokenizer {
            inner,
            stop_ids,
            bos,
            eos,
            add_bos,
            vocab,
        }
    }

    /// Encode text. Special-token text (`<|im_start|>`) maps to its id; a BOS is prepended
    /// when the model asks for one and `add_bos` is set, unless the text already begins with it.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(tok_err)?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if add_bos && self.add_bos {
            // A chat template that writes the BOS itself (Llama 3's `<|begin_of_text|>`) gets no
            // second one: a doubled BOS is off the model's training distribution.
            let starts_with_bos = |id: &u32| enc.get_ids().first() == Some(id);
            if let Some((id, _)) = self.bos.as_ref().filter(|(id, _)| !starts_with_bos(id)) {
                ids.push(*id);
            }
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Decode ids to text, dropping special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(tok_err)
    }

    /// The id of a vocabulary entry (special tokens included), if the vocabulary has it.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// The text of one vocabulary entry as the model sees it (for display of draft tokens).
    pub fn token_text(&self, id: u32) -> String {
        self.inner
            .decode(&[id], false)
            .unwrap_or_else(|_| self.vocab.get(id as usize).cloned().unwrap_or_default())
    }

    /// Ids that end generation.
    pub fn stop_ids(&self) -> &BTreeSet<u32> {
        &self.stop_ids
    }

    /// Is `id` a stop token?
    pub fn is_stop(&self, id: u32) -> bool {
        self.stop_ids.contains(&id)
    }

    /// The BOS token text, if the model has one.
    pub fn bos_text(&self) -> Option<&str> {
        self.bos.as_ref().map(|(_, s)| s.as_str())
    }

    /// The EOS token text, if the model has one.
    pub fn eos_text(&self) -> Option<&str> {
        self.eos.as_ref().map(|(_, s)| s.as_str())
    }

    /// Number of entries in the vocabulary (special tokens included).
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The vocabulary, by id.
    pub fn vocab(&self) -> &[String] {
        &self.vocab
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Turns a stream of token ids into text pieces without splitting multi-byte characters
/// (the "prefix offset / read offset" method of Hugging Face's text-generation-inference).
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl StreamDecoder {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a token; returns the text it completes, if any.
    pub fn push(&mut self, tok: &TextTokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let text = tok.decode(&self.ids[self.prefix_offset..])?;
        if text.len() > prefix.len() && !text.ends_with('\u{FFFD}') {
            let piece = match text.strip_prefix(prefix.as_str()) {
                Some(rest) => rest.to_string(),
                None => text.get(prefix.len()..).unwrap_or("").to_string(),
            };
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(Some(piece))
        } else {
            Ok(None)
        }
    }

    /// Whatever text is still held back (an incomplete character at the end).
    pub fn flush(&mut self, tok: &TextTokenizer) -> Result<Option<String>> {
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let text = tok.decode(&self.ids[self.prefix_offset..])?;
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(text
            .strip_prefix(prefix.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gguf_file::Value as V;

    /// A byte-level tokenizer whose BOS is `<|begin_of_text|>` (id 256), added to every encoding.
    fn llama3_like() -> TextTokenizer {
        let mut vocab = crate::synth::byte_level_alphabet();
        vocab.push("<|begin_of_text|>".into());
        vocab.push("<|eot_id|>".into());
        let mut md: std::collections::HashMap<String, V> =
            crate::synth::tokenizer_metadata(&vocab, 256..258, 257)
                .into_iter()
                .collect();
        md.insert("tokenizer.ggml.bos_token_id".into(), V::U32(256));
        md.insert("tokenizer.ggml.add_bos_token".into(), V::Bool(true));
        let ct = gguf_file::Content {
            magic: gguf_file::VersionedMagic::GgufV3,
            metadata: md,
            tensor_infos: Default::default(),
            tensor_data_offset: 0,
        };
        TextTokenizer::from_gguf(&ct).expect("tokenizer")
    }

    #[test]
    fn a_template_that_writes_the_bos_gets_no_second_one() {
        let tok = llama3_like();
        let plain = tok.encode("hi", true).unwrap();
        assert_eq!(plain[0], 256, "the BOS is added to plain text");
        assert_eq!(plain.len(), 3);
        let templated = tok.encode("<|begin_of_text|>hi", true).unwrap();
        assert_eq!(templated, plain, "a rendered BOS is not doubled");
        assert_eq!(tok.encode("hi", false).unwrap(), plain[1..]);
    }
}
