//! treespec's own CPU kernels for quantised weights: `y = x W^T` with `W` kept in its GGUF block
//! format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; other formats are converted to Q8_0 at
//! load).
//!
//! Why not candle's: its CPU kernels quantise the activations to 8 bits (ggml's Q8_0 / Q8_1 /
//! Q8_K), which moves SmolLM2's logits by up to ~0.7 against the same weights in f32, enough to
//! flip a near-tie into a French answer to "What is the capital of France?"; and they pick a
//! different kernel by row count (one-row dot products, AVX-512 VNNI tiles, AMX), so the logits of a
//! verify pass differ from those of a one-token step and greedy speculation drifts from `ar`.
//!
//! Here every output element is computed by one canonical procedure (see [`kernel`]):
//! activations quantised to 16 bits per block of 32 (relative error ~1.5e-5, 256x finer than
//! 8 bits), exact integer dot products per block, then a fixed sequence of f32 operations. So:
//! - the result of a row does not depend on how many rows the call holds (batch-invariant: a tree
//!   verified in one pass gets exactly the logits of one-token steps);
//! - every code path (AVX-512, AVX2, portable) gives bit-identical results, so the portable path,
//!   which a test checks against a dequantised f64 reference, vouches for the fast ones.
//!
//! The path is chosen once per process: `TREESPEC_CPU_KERNELS=auto|avx512|avx2|portable` (default
//! auto: AVX-512 where the CPU has AVX-512 F and BW besides AVX2, FMA and F16C, else AVX2 where
//! it has those three). Tests force each path in turn.

mod act;
pub(crate) mod blocks;
pub mod kernel;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_512;

pub use act::QuantActs;
pub use blocks::Format;

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// Elements per quantisation block of the activations (and per scale of the weights).
pub const BLOCK: usize = 32;

/// A CPU kernel implementation. All of them compute bit-identical results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX-512 F and BW besides: the K-quants a whole unit a vector (the 32-value
    /// formats as on [`KernelPath::Avx2`]).
    Avx512,
}

impl KernelPath {
    /// Every path, fastest first.
    pub const ALL: [KernelPath; 3] = [KernelPath::Avx512, KernelPath::Avx2, KernelPath::Portable];

    /// The name used by `TREESPEC_CPU_KERNELS`.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Portable => "portable",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512 => "avx512",
        }
    }

    /// Parse a name used by `TREESPEC_CPU_KERNELS`.
    pub fn parse(s: &str) -> Option<KernelPath> {
        KernelPath::ALL.into_iter().find(|p| p.name() == s.trim())
    }

    /// True when this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            KernelPath::Portable => true,
            KernelPath::Avx2 => x86_avx2_available(),
            KernelPath::Avx512 => x86_avx512_available(),
        }
    }

    /// The best path this CPU can run.
    pub fn best() -> KernelPath {
        KernelPath::ALL
            .into_iter()
            .find(|p| p.available())
            .unwrap_or(KernelPath::Portable)
    }
}

fn x86_avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn x86_avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86_avx2_available()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The environment variable that forces a kernel path.
pub const PATH_ENV: &str = "TREESPEC_CPU_KERNELS";

thread_local! {
    static OVERRIDE: std::cell::Cell<Option<KernelPath>> = const { std::cell::Cell::new(None) };
}

/// Run `f` with every matrix product it starts on this thread using `path` (tests use this to
/// run one model on each path in turn). Panics if the CPU cannot run `path`.
pub fn with_path<T>(path: KernelPath, f: impl FnOnce() -> T) -> T {
    assert!(
        path.available(),
        "this CPU cannot run the {} path",
        path.name()
    );
    let before = OVERRIDE.with(|o| o.replace(Some(path)));
    let out = f();
    OVERRIDE.with(|o| o.set(before));
    out
}

/// The path matrix products use: [`with_path`]'s on this thread, else `TREESPEC_CPU_KERNELS` if
/// set (and runnable here), else the best this CPU runs.
pub fn active_path() -> Result<KernelPath> {
    if let Some(p) = OVERRIDE.with(|o| o.get()) {
        return Ok(p);
    }
    static PATH: OnceLock<std::result::Result<KernelPath, String>> = OnceLock::new();
    PATH.get_or_init(|| {
        let want = std::env::var(PATH_ENV).unwrap_or_default();
        match want.trim() {
            "" | "auto" => Ok(KernelPath::best()),
            name => match KernelPath::parse(name) {
                Some(p) if p.available() => Ok(p),
                Some(p) => Err(format!(
                    "{PATH_ENV}={} asks for a kernel path this CPU cannot run",
                    p.name()
                )),
                None => Err(format!(
                    "{PATH_ENV}={name} is not a kernel path (auto, avx512, avx2, portable)"
                )),
            },
        }
    })
    .clone()
    .map_err(Error::Config)
}

/// A weight matrix `[rows, cols]` (`rows` outputs, `cols` inputs) in a GGUF block format, row by
/// row, exactly as the file stores it.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    format: Format,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl QuantMatrix {
    /// Wrap GGUF block data of a `[rows, cols]` matrix.
    pub fn new(format: Format, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        let per_block = format.block_elems();
        if cols == 0 || !cols.is_multiple_of(per_block) {
            return Err(Error::InvalidArgument(format!(
                "a {} matrix needs a multiple of {per_block} columns, not {cols}",
                format.name()
            )));
        }
        let want = rows * cols / per_block * format.block_bytes();
        if data.len() != want {
            return Err(Error::InvalidArgument(format!(
                "{} data of {} bytes for a [{rows}, {cols}] matrix (expected {want})",
                format.name(),
                data.len()
            )));
        }
        Ok(QuantMatrix {
            format,
            rows,
            cols,
            data,
        })
    }

    /// The block format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        self.cols / self.format.block_elems() * self.format.block_bytes()
    }

    /// The raw blocks of row `r`.
    pub fn row_data(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Row `r` dequantised to f32 (`out.len() == cols`).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        blocks::dequantize_row(self.format, self.row_data(r), out);
    }

    /// The whole matrix dequantised to f32, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (r, chunk) in out.chunks_mut(self.cols).enumerate() {
            self.dequantize_row(r, chunk);
        }
        out
    }

    /// `y = x W^T` for `m` rows of `x` (`x.len() == m * cols`), with the process's kernel path.
    /// Returns `m * rows` values, row-major.
    pub fn matmul(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        Ok(self.matmul_with(active_path()?, x, m))
    }

    /// `y = x W^T` on a chosen path (which must be [`KernelPath::available`]).
    pub fn matmul_with(&self, path: KernelPath, x: &[f32], m: usize) -> Vec<f32> {
        assert_eq!(x.len(), m * self.cols, "input of the wrong length");
        let acts = QuantActs::quantize(x, m, self.cols, self.format.act_block());
        kernel::matmul(self, &acts, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QStorage, QTensor};
    use candle_core::Device;
    use half::f16;
    use std::borrow::Cow;

    /// A deterministic pseudo-random source.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn f32(&mut self) -> f32 {
            (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0
        }
    }

    /// Offsets of the f16 fields of a block (scale, minimum), which random bytes must not fill
    /// with infinities.
    fn f16_fields(f: Format) -> &'static [usize] {
        match f {
            Format::Q4_0 | Format::Q5_0 | Format::Q8_0 => &[0],
            Format::Q4_1 | Format::Q5_1 | Format::Q4K | Format::Q5K => &[0, 2],
            Format::Q6K => &[208],
        }
    }

    /// Random but valid block data for a `[rows, cols]` matrix.
    pub(crate) fn random_matrix(f: Format, rows: usize, cols: usize, seed: u64) -> QuantMatrix {
        let mut rng = Lcg(seed);
        let nblocks = rows * cols / f.block_elems();
        let mut data: Vec<u8> = (0..nblocks * f.block_bytes())
            .map(|_| rng.next() as u8)
            .collect();
        for b in 0..nblocks {
            for &o in f16_fields(f) {
                let v = f16::from_f32(rng.f32() * 0.05).to_bits().to_le_bytes();
                data[b * f.block_bytes() + o..][..2].copy_from_slice(&v);
            }
        }
        QuantMatrix::new(f, rows, cols, data).unwrap()
    }

    fn ggml(f: Format) -> GgmlDType {
        match f {
            Format::Q4_0 => GgmlDType::Q4_0,
            Format::Q4_1 => GgmlDType::Q4_1,
            Format::Q5_0 => GgmlDType::Q5_0,
            Format::Q5_1 => GgmlDType::Q5_1,
            Format::Q8_0 => GgmlDType::Q8_0,
            Format::Q4K => GgmlDType::Q4K,
            Format::Q5K => GgmlDType::Q5K,
            Format::Q6K => GgmlDType::Q6K,
        }
    }

    #[test]
    fn dequantisation_matches_candle() {
        for f in Format::ALL {
            let w = random_matrix(f, 3, 512, 7);
            let storage =
                QStorage::from_data(Cow::Owned(w.data.clone()), &Device::Cpu, ggml(f)).unwrap();
            let q = QTensor::new(storage, (3, 512)).unwrap();
            let want: Vec<f32> = q
                .dequantize(&Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let got = w.dequantize();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1e-3),
                    "{} value {i}: {a} vs candle {b}",
                    f.name()
                );
            }
        }
    }

    fn inputs(m: usize, k: usize, seed: u64) -> Vec<f32> {
        let mut rng = Lcg(seed);
        let mut x: Vec<f32> = (0..m * k).map(|_| rng.f32() * 3.0).collect();
        // A massive activation, as small LMs have in a few channels.
        if k > 40 {
            x[37] = 2500.0;
        }
        x
    }

    #[test]
    fn every_path_is_close_to_f64_and_identical_to_portable() {
        for f in Format::ALL {
            for (rows, cols) in [(5, 256), (9, 512), (16, 768)] {
                let w = random_matrix(f, rows, cols, rows as u64 * 31 + cols as u64);
                let dense = w.dequantize();
                for m in [1usize, 2, 3, 4, 5, 7, 9] {
                    let x = inputs(m, cols, m as u64);
                    let portable = w.matmul_with(KernelPath::Portable, &x, m);
                    for r in 0..m {
                        for c in 0..rows {
                            // Worst case of the 16-bit activations: half a step per value.
                            let (mut exact, mut mag, mut bound) = (0f64, 0f64, 0f64);
                            for i in 0..cols {
                                let xi = x[r * cols + i] as f64;
                                let wi = dense[c * cols + i] as f64;
                                let ab = f.act_block();
                                let block = &x[r * cols + i / ab * ab..][..ab];
                                let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
                                exact += xi * wi;
                                mag += (xi * wi).abs();
                                bound += 0.5 * amax as f64 / 32767.0 * wi.abs();
                            }
                            let got = portable[r * rows + c] as f64;
                            assert!(
                                (got - exact).abs() <= bound + 1e-6 * mag + 1e-6,
                                "{} [{rows}x{cols}] m={m} ({r},{c}): {got} vs {exact} (|.| {mag})",
                                f.name()
                            );
                        }
                    }
                    for path in KernelPath::ALL.into_iter().filter(|p| p.available()) {
                        let got = w.matmul_with(path, &x, m);
                        for (i, (a, b)) in got.iter().zip(&portable).enumerate() {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "{} path {} m={m} element {i}: {a} vs portable {b}",
                                f.name(),
                                path.name()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_row_does_not_depend_on_the_other_rows() {
        for f in Format::ALL {
            let w = random_matrix(f, 12, 512, 3);
            let m = 9;
            let x = inputs(m, 512, 11);
            for path in KernelPath::ALL.into_iter().filter(|p| p.available()) {
                let all = w.matmul_with(path, &x, m);
                for r in 0..m {
                    let one = w.matmul_with(path, &x[r * 512..(r + 1) * 512], 1);
                    assert_eq!(
                        one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        all[r * 12..(r + 1) * 12]
                            .iter()
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>(),
                        "{} path {}: row {r} alone differs from row {r} of {m}",
                        f.name(),
                        path.name()
                    );
                }
            }
        }
    }

    #[test]
    fn non_finite_inputs_give_nan_not_garbage() {
        let w = random_matrix(Format::Q8_0, 4, 64, 1);
        let mut x = vec![0.5f32; 64];
        x[3] = f32::INFINITY;
        for path in KernelPath::ALL.into_iter().filter(|p| p.available()) {
            assert!(w.matmul_with(path, &x, 1).iter().all(|v| v.is_nan()));
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_cpu_with_avx512_runs_the_avx512_path() {
        // So that the path tests above cannot skip it unnoticed on a CPU that has it.
        use std::arch::is_x86_feature_detected as has;
        let all =
            has!("avx512f") && has!("avx512bw") && has!("avx2") && has!("fma") && has!("f16c");
        assert_eq!(KernelPath::Avx512.available(), all);
        if all {
            assert_eq!(KernelPath::best(), KernelPath::Avx512);
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(QuantMatrix::new(Format::Q4K, 2, 128, vec![0; 144]).is_err());
        assert!(QuantMatrix::new(Format::Q8_0, 2, 64, vec![0; 10]).is_err());
    }
}
