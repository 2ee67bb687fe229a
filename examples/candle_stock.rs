//! Baseline for BENCHMARKS.md: greedy decoding with candle-transformers' own quantised model files
//! (`quantized_llama` / `quantized_qwen2`) on a GGUF file, timed the same way as
//! `treespec generate` (prefill, then decode tokens/s).
//!
//!     cargo run --release --example candle_stock -- MODEL.gguf "prompt" [max_tokens] [cpu|cuda]

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use std::io::Write;
use std::time::Instant;
use treespec::model::chat_template::{ChatMessage, ChatTemplate, Role};
use treespec::model::tokenizer::TextTokenizer;
use treespec::sampling::argmax;

enum Stock {
    Llama(candle_transformers::models::quantized_llama::ModelWeights),
    Qwen2(candle_transformers::models::quantized_qwen2::ModelWeights),
}

impl Stock {
    fn forward(&mut self, x: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Stock::Llama(m) => m.forward(x, pos),
            Stock::Qwen2(m) => m.forward(x, pos),
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or_else(|| anyhow::anyhow!("usage: candle_stock MODEL PROMPT [N] [cpu|cuda]"))?;
    let prompt = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "What is the capital of France?".into());
    let max_tokens: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(128);
    let device = match args.get(4).map(String::as_str) {
        Some("cuda") => Device::new_cuda(0)?,
        _ => Device::Cpu,
    };
    let mut file = std::fs::File::open(path)?;
    let ct = gguf_file::Content::read(&mut file)?;
    let tok = TextTokenizer::from_gguf(&ct)?;
    let tmpl_src = ct
        .metadata
        .get("tokenizer.chat_template")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_else(|| treespec::model::chat_template::CHATML.into());
    let arch = ct.metadata["general.architecture"].to_string()?.clone();
    let tmpl = ChatTemplate::new(&tmpl_src, tok.bos_text(), tok.eos_text())?;
    let text = tmpl.render(&[ChatMessage::new(Role::User, prompt)], true)?;
    let ids = tok.encode(&text, true)?;
    let mut model = match arch.as_str() {
        "qwen2" => Stock::Qwen2(
            candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(
                ct, &mut file, &device,
            )?,
        ),
        _ => Stock::Llama(
            candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
                ct, &mut file, &device,
            )?,
        ),
    };
    // Warm-up (candle repacks quantised weights lazily per kernel shape), then start clean.
    let input = Tensor::new(ids.as_slice(), &device)?.unsqueeze(0)?;
    model.forward(&input, 0)?;
    for i in 0..3 {
        let one = Tensor::new(&[ids[0]], &device)?.unsqueeze(0)?;
        model.forward(&one, ids.len() + i)?;
    }
    match &mut model {
        Stock::Llama(m) => m.clear_kv_cache(),
        Stock::Qwen2(m) => m.clear_kv_cache(),
    }
    let t0 = Instant::now();
    let logits = model.forward(&input, 0)?.squeeze(0)?.to_vec1::<f32>()?;
    let mut next = argmax(&logits).unwrap_or(0);
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    let mut out = vec![];
    let mut steps = 0;
    while !tok.is_stop(next) && out.len() < max_tokens {
        out.push(next);
        let input = Tensor::new(&[next], &device)?.unsqueeze(0)?;
        let logits = model
            .forward(&input, ids.len() + out.len() - 1)?
            .squeeze(0)?
            .to_vec1::<f32>()?;
        steps += 1;
        next = argmax(&logits).unwrap_or(0);
    }
    let decode = t1.elapsed();
    let mut so = std::io::stdout().lock();
    writeln!(so, "{}", tok.decode(&out)?)?;
    eprintln!(
        "[candle stock {arch}] prompt {} tokens, prefill {:.1} ms, decode {} tokens at {:.2} tok/s",
        ids.len(),
        prefill.as_secs_f64() * 1e3,
        out.len(),
        steps as f64 / decode.as_secs_f64()
    );
    Ok(())
}
