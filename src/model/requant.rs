//! One-time re-quantisation of GGUF weights whose formats have no fast CPU kernel in candle
//! (Q4_1, Q5_0, Q5_1) to Q8_0, cached beside the fetched models.

use crate::error::{Error, Result};
use crate::model::weights::read_gguf_header;
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

/// Formats candle 0.11 runs without SIMD on x86 CPUs.
pub fn is_slow_on_cpu(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1)
}

/// True when any tensor of the file is in a slow format.
pub fn needs_requant(content: &gguf_file::Content) -> bool {
    content
        .tensor_infos
        .values()
        .any(|t| is_slow_on_cpu(t.ggml_dtype))
}

/// The cached Q8_0 copy of `src`, made on first use.
pub fn requantized_copy(src: &Path, cache_dir: &Path) -> Result<PathBuf> {
    requantized_copy_as(src, cache_dir, GgmlDType::Q8_0)
}

/// The cached copy of `src` with every slow-format tensor re-quantised to `to` (Q8_0 or Q4_0).
pub fn requantized_copy_as(src: &Path, cache_dir: &Path, to: GgmlDType) -> Result<PathBuf> {
    let suffix = match to {
        GgmlDType::Q4_0 => "q4_0",
        _ => "q8_0",
    };
    let meta = std::fs::metadata(src).map_err(|_| Error::NotFound(src.to_path_buf()))?;
    let stem = src
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    let dst = cache_dir.join(format!("{stem}.{}.{suffix}.gguf", meta.len()));
    if dst.is_file() && read_gguf_header(&dst).is_ok() {
        return Ok(dst);
    }
    std::fs::create_dir_all(cache_dir)?;
    // One process converts while any other waits, then finds the finished copy.
    let lock = File::create(dst.with_extension("lock"))?;
    lock.lock()?;
    if dst.is_file() && read_gguf_header(&dst).is_ok() {
        return Ok(dst);
    }
    let content = read_gguf_header(src)?;
    let mut reader = BufReader::new(File::open(src)?);
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let bar = indicatif::ProgressBar::new(names.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("re-quantising {msg} {bar:30} {pos}/{len} tensors")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(stem.clone());
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let q = content.tensor(&mut reader, name, &Device::Cpu)?;
        let q = if is_slow_on_cpu(q.dtype()) && q.shape().dims().last().is_some_and(|d| d % 32 == 0)
        {
            QTensor::quantize(&q.dequantize(&Device::Cpu)?, to)?
        } else {
            q
        };
        tensors.push((name.clone(), q));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.as_str() != "general.alignment")
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let tmp = dst.with_extension("partial");
    {
        let mut w = BufWriter::new(File::create(&tmp)?);
        gguf_file::write(&mut w, &metadata, &refs)?;
        use std::io::Write;
        w.flush()?;
    }
    std::fs::rename(&tmp, &dst)?;
    Ok(dst)
}
