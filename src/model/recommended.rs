//! What a model's own files recommend to a chat that sets nothing itself: the sampling settings
//! of a GGUF file's `general.sampling.*` keys (llama.cpp's names) or of a checkpoint's
//! `generation_config.json`.

use super::source::ModelFiles;
use super::weights::read_gguf_header;
use crate::sampling::SamplingParams;
use candle_core::quantized::gguf_file::Value;

/// Sampling settings a model recommends; each is `None` where the files say nothing.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct RecommendedSampling {
    /// Temperature.
    pub temperature: Option<f32>,
    /// Nucleus mass.
    pub top_p: Option<f32>,
    /// Top-k.
    pub top_k: Option<usize>,
}

impl RecommendedSampling {
    /// The values a file gives, each kept only where the sampler takes it
    /// ([`SamplingParams::temperature_ok`], [`SamplingParams::top_p_ok`]).
    fn checked(temperature: Option<f64>, top_p: Option<f64>, top_k: Option<usize>) -> Self {
        RecommendedSampling {
            temperature: temperature
                .map(|t| t as f32)
                .filter(|&t| SamplingParams::temperature_ok(t)),
            top_p: top_p
                .map(|p| p as f32)
                .filter(|&p| SamplingParams::top_p_ok(p)),
            top_k,
        }
    }

    /// Whether the files recommend anything.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// One line for the user: what is recommended (`temperature 0.6, top-p 0.95, top-k 20`).
    pub fn describe(&self) -> String {
        let mut parts = vec![];
        if let Some(t) = self.temperature {
            parts.push(format!("temperature {t}"));
        }
        if let Some(p) = self.top_p {
            parts.push(format!("top-p {p}"));
        }
        if let Some(k) = self.top_k {
            parts.push(format!("top-k {k}"));
        }
        parts.join(", ")
    }
}

/// The sampling `files` recommend; files that cannot be read recommend nothing (loading them
/// reports the real error).
pub fn sampling(files: &ModelFiles) -> RecommendedSampling {
    match files {
        ModelFiles::Gguf(path) => read_gguf_header(path)
            .map(|ct| from_gguf(&ct.metadata))
            .unwrap_or_default(),
        ModelFiles::Checkpoint(dir) => std::fs::read_to_string(dir.join("generation_config.json"))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .map(|v| from_generation_config(&v))
            .unwrap_or_default(),
    }
}

/// A float of any of GGUF's numeric types.
fn number(v: &Value) -> Option<f64> {
    use Value::*;
    match v {
        F32(x) => Some(*x as f64),
        F64(x) => Some(*x),
        other => super::config::gguf_usize(other).map(|x| x as f64),
    }
}

/// `general.sampling.temp`, `.top_p` and `.top_k` of a GGUF file's metadata.
pub fn from_gguf(md: &std::collections::HashMap<String, Value>) -> RecommendedSampling {
    let get = |k: &str| md.get(&format!("general.sampling.{k}")).and_then(number);
    RecommendedSampling::checked(get("temp"), get("top_p"), get("top_k").map(|x| x as usize))
}

/// `temperature`, `top_p` and `top_k` of a `generation_config.json` that samples (`do_sample`
/// not false).
pub fn from_generation_config(v: &serde_json::Value) -> RecommendedSampling {
    if v.get("do_sample").and_then(|d| d.as_bool()) == Some(false) {
        return RecommendedSampling::default();
    }
    let f = |k: &str| v.get(k).and_then(|x| x.as_f64());
    let top_k = v.get("top_k").and_then(|x| x.as_u64()).map(|k| k as usize);
    RecommendedSampling::checked(f("temperature"), f("top_p"), top_k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_keys_are_read_whatever_their_numeric_type() {
        let md = [
            ("general.sampling.temp", Value::F32(0.6)),
            ("general.sampling.top_p", Value::F64(0.95)),
            ("general.sampling.top_k", Value::I32(20)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let r = from_gguf(&md);
        assert_eq!(r.temperature, Some(0.6));
        assert_eq!(r.top_p, Some(0.95));
        assert_eq!(r.top_k, Some(20));
        assert_eq!(r.describe(), "temperature 0.6, top-p 0.95, top-k 20");
        assert!(from_gguf(&Default::default()).is_empty());
    }

    #[test]
    fn a_generation_config_that_does_not_sample_recommends_nothing() {
        let v =
            serde_json::json!({"do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20});
        let r = from_generation_config(&v);
        assert_eq!(
            (r.temperature, r.top_p, r.top_k),
            (Some(0.7), Some(0.8), Some(20))
        );
        let greedy = serde_json::json!({"do_sample": false, "temperature": 0.7});
        assert!(from_generation_config(&greedy).is_empty());
        let bad = serde_json::json!({"temperature": -1.0, "top_p": 2.0});
        assert!(from_generation_config(&bad).is_empty());
    }
}
