//! The Gated DeltaNet layer of Qwen3.5 / 3.6 hybrid models ("linear attention"), and its
//! recurrent state kept so that a speculative block, a chain or a draft tree, can be verified in
//! one pass and only its accepted path committed.
//!
//! Paper: Yang, Kautz and Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule",
//! arXiv:2412.06464. Reference implementations: Hugging Face transformers'
//! `models/qwen3_5/modeling_qwen3_5.py` (`Qwen3_5GatedDeltaNet`, `torch_recurrent_gated_delta_rule`,
//! `Qwen3_5RMSNormGated`); llama.cpp's `src/models/qwen35.cpp`.
//!
//! Per row t, with `x_t` the layer's normed input:
//!
//! ```text
//! c_t = in_proj_qkv(x_t)                      channels [q (key heads) | k | v]
//! u_t = silu(sum_j conv[., j] * c_{t-K+1+j})   a causal depthwise convolution over the row's path
//! q, k = l2norm(q), l2norm(k); q /= sqrt(dk)
//! beta = sigmoid(in_proj_b(x_t)), g = -exp(A_log) * softplus(in_proj_a(x_t) + dt_bias)
//! per value head h (key head h / (v_heads / k_heads)), state S [dk, dv]:
//!   S = S * exp(g);  S += k (beta (v - S^T k))^T;  o = S^T q
//! out = out_proj(rmsnorm(o) * w * silu(in_proj_z(x_t)))   per value head
//! ```
//!
//! Each row of a block continues the state of its parent row (its predecessor in a chain, its
//! parent node in a tree), or the committed state for the block's roots: this is the per-node
//! recurrence, exact for any tree, and the oracle the chunked tree form of a GPU kernel must
//! match (`../shared/research/hybrid-targets.md` §6.2). The state after a row is never stored
//! for long: a block keeps, per row, what it takes to redo the row (its convolution input and
//! its `a`, `b` projections), and committing a path replays those rows from the committed state
//! with the same arithmetic, so the committed state is bit for bit what a one-row step reaches.

pub use crate::arch::batch::Fold;
use crate::arch::config::{LinearAttention, ModelConfig};
use crate::arch::weights::{Linear, WeightStore};
use crate::error::{Error, Result};
use crate::gpu::gdn;
use candle_core::{DType, Device, Tensor};

/// The recurrent state of one Gated DeltaNet layer for a sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct GdnState {
    /// Per value head the `[dk, dv]` state, row-major.
    s: Vec<f32>,
    /// The convolution's last `K - 1` inputs, oldest first, `C` channels each.
    window: Vec<f32>,
}

/// What a row of a block leaves to redo it: its convolution input and its gate projections.
#[derive(Debug, Clone)]
struct RowInput {
    c: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
}

/// A layer's state for a sequence: on the host, or on the GPU where the layer runs the kernels
/// ([`crate::gpu::gdn`]).
#[derive(Debug, Clone)]
enum State {
    Host(GdnState),
    Device(gdn::State),
}

/// What a block leaves to commit any path of it.
#[derive(Debug, Clone)]
enum Rows {
    Host(Vec<RowInput>),
    Device(gdn::Block),
}

/// A Gated DeltaNet layer's weights (its input norm and MLP are the decoder layer's).
pub struct GatedDeltaNet {
    qkv: Linear,
    z: Linear,
    b: Linear,
    a: Linear,
    out: Linear,
    /// `[C][K]`: channel c's taps, oldest input first.
    conv: Vec<f32>,
    /// `-exp(A_log)` per value head.
    a_neg: Vec<f32>,
    dt_bias: Vec<f32>,
    /// The output norm's weight (plain `w`, no offset), `[dv]`.
    norm: Vec<f32>,
    shape: LinearAttention,
    eps: f32,
    /// The small weights on the GPU, where the layer runs the kernels there.
    gpu: Option<gdn::Weights>,
}

impl GatedDeltaNet {
    /// Load the layer whose GGUF names start `{blk}.` (`attn_qkv`, `attn_gate`, `ssm_beta`,
    /// `ssm_alpha`, `ssm_conv1d`, `ssm_a`, `ssm_dt.bias`, `ssm_norm`, `ssm_out`; a Hugging Face
    /// checkpoint's `linear_attn.*` names through the store).
    pub fn load(store: &mut WeightStore, blk: &str, cfg: &ModelConfig) -> Result<Self> {
        let shape = cfg
            .linear
            .clone()
            .ok_or_else(|| Error::Config("a Gated DeltaNet layer in a model without".into()))?;
        let (h, hv) = (cfg.hidden, shape.v_heads);
        let (ch, vd) = (shape.conv_channels(), shape.v_heads * shape.v_dim);
        let name = |s: &str| format!("{blk}.{s}");
        let linear = |store: &mut WeightStore, s: &str, rows: usize, cols: usize| {
            Linear::new(store.get_checked(&name(s), &[rows, cols])?, None)
        };
        let host = |store: &mut WeightStore, s: &str| -> Result<Vec<f32>> {
            Ok(store
                .get_dense(&name(s))?
                .to_device(&Device::Cpu)?
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?)
        };
        let conv = host(store, "ssm_conv1d.weight")?;
        if conv.len() != ch * shape.conv {
            return Err(Error::Config(format!(
                "{blk}: a convolution of {} values for {ch} channels of {} taps",
                conv.len(),
                shape.conv
            )));
        }
        let a = host(store, "ssm_a")?;
        // Hugging Face stores A_log; llama.cpp's GGUF stores -exp(A_log).
        let a_neg = match store.hugging_face() {
            true => a.iter().map(|v| -v.exp()).collect(),
            false => a,
        };
        let dt_bias = host(store, "ssm_dt.bias")?;
        let norm = host(store, "ssm_norm.weight")?;
        if a_neg.len() != hv || dt_bias.len() != hv || norm.len() != shape.v_dim {
            return Err(Error::Config(format!(
                "{blk}: gate vectors of {} and {} values and a norm of {} for {hv} value heads of {}",
                a_neg.len(),
                dt_bias.len(),
                norm.len(),
                shape.v_dim
            )));
        }
        let eps = cfg.rms_eps as f32;
        let device = store.device().clone();
        let gpu = gdn::Weights::upload(&device, &shape, eps, (&conv, &a_neg, &dt_bias, &norm))?;
        Ok(GatedDeltaNet {
            qkv: linear(store, "attn_qkv.weight", ch, h)?,
            z: linear(store, "attn_gate.weight", vd, h)?,
            b: linear(store, "ssm_beta.weight", hv, h)?,
            a: linear(store, "ssm_alpha.weight", hv, h)?,
            out: linear(store, "ssm_out.weight", h, vd)?,
            conv,
            a_neg,
            dt_bias,
            norm,
            shape,
            eps,
            gpu,
        })
    }

    /// The layer as the GPU decoder step reads it: its projections of the normed input in the
    /// step's order (convolution input, output gate, beta, alpha), its out projection and its
    /// small weights on the GPU (`None` where the layer runs on the host recurrence).
    pub(crate) fn step_weights(&self) -> Option<(Vec<&Linear>, &Linear, &gdn::Weights)> {
        let gpu = self.gpu.as_ref()?;
        Some((vec![&self.qkv, &self.z, &self.b, &self.a], &self.out, gpu))
    }

    /// The state of an empty sequence, where this layer keeps it (host or GPU).
    fn zero(&self) -> Result<State> {
        Ok(match &self.gpu {
            Some(g) => State::Device(g.zero_state()?),
            None => State::Host(self.zero_state()),
        })
    }

    /// The state of an empty sequence on the host.
    pub fn zero_state(&self) -> GdnState {
        let l = &self.shape;
        GdnState {
            s: vec![0.0; l.v_heads * l.k_dim * l.v_dim],
            window: vec![0.0; (l.conv - 1) * l.conv_channels()],
        }
    }

    /// Advance `st` by one row (`input`), returning the row's output per value head `[hv * dv]`
    /// (before the gated norm).
    fn step(&self, st: &mut GdnState, input: &RowInput) -> Vec<f32> {
        let l = &self.shape;
        let (ch, taps) = (l.conv_channels(), l.conv);
        // The convolution over the window and this row's input, then SiLU.
        let mut u = vec![0f32; ch];
        for (c, uc) in u.iter_mut().enumerate() {
            let w = &self.conv[c * taps..(c + 1) * taps];
            let mut acc = 0f32;
            for (j, &wj) in w[..taps - 1].iter().enumerate() {
                acc += wj * st.window[j * ch + c];
            }
            acc += w[taps - 1] * input.c[c];
            *uc = acc / (1.0 + (-acc).exp());
        }
        if taps > 1 {
            st.window.copy_within(ch.., 0);
            let last = (taps - 2) * ch;
            st.window[last..].copy_from_slice(&input.c);
        }
        let (kd, vd) = (l.k_dim, l.v_dim);
        let (q_all, rest) = u.split_at_mut(l.k_heads * kd);
        let (k_all, v_all) = rest.split_at_mut(l.k_heads * kd);
        let l2 = |x: &mut [f32]| {
            let ss: f32 = x.iter().map(|v| v * v).sum();
            let inv = 1.0 / (ss + 1e-6).sqrt();
            x.iter_mut().for_each(|v| *v *= inv);
        };
        let scale = 1.0 / (kd as f32).sqrt();
        for hk in 0..l.k_heads {
            let q = &mut q_all[hk * kd..(hk + 1) * kd];
            l2(q);
            q.iter_mut().for_each(|v| *v *= scale);
            l2(&mut k_all[hk * kd..(hk + 1) * kd]);
        }
        let mut o = vec![0f32; l.v_heads * vd];
        for h in 0..l.v_heads {
            let hk = l.key_head(h);
            let (q, k) = (
                &q_all[hk * kd..(hk + 1) * kd],
                &k_all[hk * kd..(hk + 1) * kd],
            );
            let v = &v_all[h * vd..(h + 1) * vd];
            let beta = 1.0 / (1.0 + (-input.b[h]).exp());
            let x = input.a[h] + self.dt_bias[h];
            let softplus = if x > 20.0 { x } else { x.exp().ln_1p() };
            let decay = (self.a_neg[h] * softplus).exp();
            let s = &mut st.s[h * kd * vd..(h + 1) * kd * vd];
            s.iter_mut().for_each(|x| *x *= decay);
            // delta = beta (v - S^T k); S += k delta^T; o = S^T q
            let mut delta = v.to_vec();
            for i in 0..kd {
                let row = &s[i * vd..(i + 1) * vd];
                for (d, &sv) in delta.iter_mut().zip(row) {
                    *d -= sv * k[i];
                }
            }
            delta.iter_mut().for_each(|d| *d *= beta);
            for i in 0..kd {
                let row = &mut s[i * vd..(i + 1) * vd];
                for (sv, &d) in row.iter_mut().zip(&delta) {
                    *sv += k[i] * d;
                }
            }
            let oh = &mut o[h * vd..(h + 1) * vd];
            for i in 0..kd {
                let row = &s[i * vd..(i + 1) * vd];
                for (ov, &sv) in oh.iter_mut().zip(row) {
                    *ov += sv * q[i];
                }
            }
        }
        o
    }

    /// The rows of a block (`x` the layer's normed input `[n, hidden]`), row i continuing the
    /// state after row `parents[i]` (an earlier row) or `start` (`None`): the layer's output
    /// `[n, hidden]`, each row's input for a later replay, and the state after the last row when
    /// the block is a chain (every row the previous one's child).
    fn run(
        &self,
        x: &Tensor,
        parents: &[Option<usize>],
        start: &State,
    ) -> Result<(Tensor, Rows, Option<State>)> {
        match (start, &self.gpu) {
            (State::Host(start), _) => {
                let (out, inputs, last) = self.host_run(x, parents, start)?;
                Ok((out, Rows::Host(inputs), last.map(State::Host)))
            }
            (State::Device(start), Some(g)) => {
                let proj = |l: &Linear| -> Result<Tensor> {
                    Ok(l.forward(x)?.to_dtype(DType::F32)?.contiguous()?)
                };
                let (c, z, a, b) = (
                    proj(&self.qkv)?,
                    proj(&self.z)?,
                    proj(&self.a)?,
                    proj(&self.b)?,
                );
                let (gated, block, last) = g.block((&c, &z, &a, &b), parents, start, true)?;
                let gated = gated.to_dtype(x.dtype())?;
                Ok((
                    self.out.forward(&gated)?,
                    Rows::Device(block),
                    last.map(State::Device),
                ))
            }
            (State::Device(_), None) => Err(no_kernels()),
        }
    }

    /// `start` with the block's rows `path` (a path from a root, in order) folded in.
    fn replay(&self, start: &State, rows: &Rows, path: &[usize]) -> Result<State> {
        let Some(&last) = path.last() else {
            return Ok(start.clone());
        };
        match (start, rows, &self.gpu) {
            (State::Host(s), Rows::Host(inputs), _) => {
                let mut s = s.clone();
                for &r in path {
                    self.step(&mut s, &inputs[r]);
                }
                Ok(State::Host(s))
            }
            (State::Device(s), Rows::Device(block), Some(g)) => {
                Ok(State::Device(g.commit(s, block, last)?))
            }
            _ => Err(no_kernels()),
        }
    }

    /// The rows of a block on the host (see [`Self::run`]).
    fn host_run(
        &self,
        x: &Tensor,
        parents: &[Option<usize>],
        start: &GdnState,
    ) -> Result<(Tensor, Vec<RowInput>, Option<GdnState>)> {
        let n = parents.len();
        let device = x.device().clone();
        let host = |t: Tensor| -> Result<Vec<f32>> {
            Ok(t.to_device(&Device::Cpu)?
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?)
        };
        let l = &self.shape;
        let (ch, hv, vd) = (l.conv_channels(), l.v_heads, l.v_dim);
        let c = host(self.qkv.forward(x)?)?;
        let z = host(self.z.forward(x)?)?;
        let a = host(self.a.forward(x)?)?;
        let b = host(self.b.forward(x)?)?;
        let inputs: Vec<RowInput> = (0..n)
            .map(|i| RowInput {
                c: c[i * ch..(i + 1) * ch].to_vec(),
                a: a[i * hv..(i + 1) * hv].to_vec(),
                b: b[i * hv..(i + 1) * hv].to_vec(),
            })
            .collect();
        // The last row that continues each row: a row's state is dropped after it.
        let mut last_child = vec![None; n];
        for (i, p) in parents.iter().enumerate() {
            if let Some(p) = *p {
                if p >= i {
                    return Err(Error::InvalidArgument(format!(
                        "row {i} continues row {p}, which does not come before it"
                    )));
                }
                last_child[p] = Some(i);
            }
        }
        let mut states: Vec<Option<GdnState>> = vec![None; n];
        let mut gated = vec![0f32; n * hv * vd];
        for i in 0..n {
            let mut st = match parents[i] {
                Some(p) => states[p]
                    .clone()
                    .ok_or_else(|| Error::Device(format!("row {i}: its parent's state is gone")))?,
                None => start.clone(),
            };
            let o = self.step(&mut st, &inputs[i]);
            // The gated norm per value head: rmsnorm(o) * w * silu(z).
            for h in 0..hv {
                let oh = &o[h * vd..(h + 1) * vd];
                let zh = &z[(i * hv + h) * vd..(i * hv + h + 1) * vd];
                let ms: f32 = oh.iter().map(|v| v * v).sum::<f32>() / vd as f32;
                let inv = 1.0 / (ms + self.eps).sqrt();
                let out = &mut gated[(i * hv + h) * vd..(i * hv + h + 1) * vd];
                for d in 0..vd {
                    let silu = zh[d] / (1.0 + (-zh[d]).exp());
                    out[d] = oh[d] * inv * self.norm[d] * silu;
                }
            }
            if let Some(p) = parents[i] {
                if last_child[p] == Some(i) {
                    states[p] = None;
                }
            }
            if last_child[i].is_some() || i + 1 == n {
                states[i] = Some(st);
            }
        }
        let chain = crate::arch::batch::is_chain(parents);
        let last = if chain { states[n - 1].take() } else { None };
        let gated = Tensor::from_vec(gated, (n, hv * vd), &device)?;
        Ok((self.out.forward(&gated)?, inputs, last))
    }
}

/// Rows of a block up to which each row's input is kept for a later commit of part of it (a
/// verify pass's chain or tree); a longer block (a prompt) keeps only the state after it, and a
/// commit of part of it starts the sequence again.
pub const STASH_ROWS: usize = 1024;

/// Which rows of a sequence a recurrent layer has folded into its state, and the last block run
/// after them, not yet folded (a verify pass's rows wait for the walk to say which to keep): the
/// rules of [`RecurrentCache`], for a state kept anywhere (the host, the GPU, or the buffers of
/// the GPU decoder step, which folds a block at the start of the next pass).
#[derive(Debug, Clone, Default)]
pub struct BlockLedger {
    /// Rows folded into the state.
    len: usize,
    /// The block after them.
    pending: Option<PendingBlock>,
    /// The state was dropped: the next fold starts from the empty state.
    restart: bool,
}

#[derive(Debug, Clone)]
struct PendingBlock {
    /// The block's parents.
    parents: Vec<Option<usize>>,
    /// The block's rows that follow the folded ones, a path from a root in order (what a keep or
    /// a truncation left); the whole block where `None`.
    path: Option<Vec<usize>>,
    /// Its rows' inputs were kept, so any path of it can be replayed.
    replayable: bool,
}

impl PendingBlock {
    /// Rows pending.
    fn len(&self) -> usize {
        self.path.as_ref().map_or(self.parents.len(), Vec::len)
    }

    /// The parent of pending row `i` among the pending rows.
    fn parent(&self, i: usize) -> Option<usize> {
        match &self.path {
            None => self.parents[i],
            Some(_) => i.checked_sub(1),
        }
    }

    /// The block row of pending row `i`.
    fn block_row(&self, i: usize) -> usize {
        self.path.as_ref().map_or(i, |p| p[i])
    }
}

impl BlockLedger {
    /// Rows seen (folded and pending).
    pub fn len(&self) -> usize {
        self.len + self.pending.as_ref().map_or(0, PendingBlock::len)
    }

    /// True when no row has been seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pending rows, now counted as folded: the caller folds them into its state (from the
    /// empty state where `restart`), or drops the state where it cannot (a tree nobody kept a
    /// path of, rows not kept: then [`Self::reset`]).
    pub fn take_fold(&mut self) -> Fold {
        let restart = std::mem::take(&mut self.restart);
        let Some(p) = self.pending.take() else {
            return Fold {
                restart,
                chain: true,
                ..Fold::default()
            };
        };
        let rows = p.len();
        self.len += rows;
        Fold {
            restart,
            path: (0..rows).map(|i| p.block_row(i)).collect(),
            whole: p.path.is_none(),
            chain: (0..rows).all(|i| p.parent(i) == i.checked_sub(1)),
            replayable: p.replayable,
        }
    }

    /// A block run after every row seen (after [`Self::take_fold`]), row i continuing
    /// `parents[i]` or the last folded row; `replayable` where its rows' inputs are kept.
    pub fn push(&mut self, parents: &[Option<usize>], replayable: bool) {
        debug_assert!(self.pending.is_none());
        self.pending = Some(PendingBlock {
            parents: parents.to_vec(),
            path: None,
            replayable,
        });
    }

    /// Keep the rows seen up to `len`: the folded ones and the pending block's first rows, where
    /// they are a chain whose inputs were kept. Any other length cannot be reached again (the
    /// states are gone): the sequence starts over at 0. Returns the rows kept.
    pub fn truncate(&mut self, len: usize) -> usize {
        if len >= self.len() {
            return self.len();
        }
        let Some(mut p) = self.pending.take() else {
            self.reset();
            return 0;
        };
        let keep = len.saturating_sub(self.len);
        let chain = (0..keep).all(|i| p.parent(i) == i.checked_sub(1));
        if len < self.len || !chain || !p.replayable {
            self.reset();
            return 0;
        }
        p.path = Some((0..keep).map(|i| p.block_row(i)).collect());
        self.pending = Some(p);
        self.len()
    }

    /// Of the pending block, whose first row follows the folded rows at `base`, keep the rows
    /// `rows` (a path from a root, in order) as the sequence's next rows. A block whose inputs
    /// were not kept cannot be: the sequence starts over (the caller reads it anew; [`Self::len`]
    /// says 0).
    pub fn keep(&mut self, base: usize, rows: &[usize]) -> Result<()> {
        let Some(mut p) = self.pending.take() else {
            if rows.is_empty() && base == self.len {
                return Ok(());
            }
            return Err(Error::InvalidArgument(format!(
                "keep from {base}: no block after the {} committed rows",
                self.len
            )));
        };
        if base != self.len {
            self.pending = Some(p);
            return Err(Error::InvalidArgument(format!(
                "keep from {base}: the last block starts at {}",
                self.len
            )));
        }
        for (k, &r) in rows.iter().enumerate() {
            let want = if k == 0 { None } else { Some(rows[k - 1]) };
            if r >= p.len() || p.parent(r) != want {
                self.pending = Some(p);
                return Err(Error::InvalidArgument(format!(
                    "keep: rows {rows:?} are not a path from the block's root"
                )));
            }
        }
        if !p.replayable {
            self.reset();
            return Ok(());
        }
        p.path = Some(rows.iter().map(|&r| p.block_row(r)).collect());
        self.pending = Some(p);
        Ok(())
    }

    /// Forget the sequence (the state is dropped at the next fold).
    pub fn reset(&mut self) {
        *self = BlockLedger {
            restart: true,
            ..BlockLedger::default()
        };
    }
}

/// One Gated DeltaNet layer's state for a sequence: the state after the committed rows, and what
/// the last block left to fold any path of it ([`BlockLedger`] says which rows are which).
#[derive(Debug, Clone)]
pub struct RecurrentCache {
    committed: State,
    ledger: BlockLedger,
    /// What it takes to replay the last block's rows, where it was short enough to keep it.
    rows: Option<Rows>,
    /// The state after the last block's last row, where the block is a chain.
    last: Option<State>,
    zero: State,
}

impl RecurrentCache {
    /// An empty sequence's state for `layer` (on the GPU where the layer runs there).
    pub fn new(layer: &GatedDeltaNet) -> Result<Self> {
        let zero = layer.zero()?;
        Ok(RecurrentCache {
            committed: zero.clone(),
            ledger: BlockLedger::default(),
            rows: None,
            last: None,
            zero,
        })
    }

    /// Rows seen (committed and pending).
    pub fn len(&self) -> usize {
        self.ledger.len()
    }

    /// True when no row has been seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Run a block through `layer` after every row seen so far (a pending block taken whole,
    /// as a new block after it means), row i continuing `parents[i]` or the sequence's last row.
    pub fn forward(
        &mut self,
        layer: &GatedDeltaNet,
        x: &Tensor,
        parents: &[Option<usize>],
    ) -> Result<Tensor> {
        let seen = self.len();
        self.commit_first(layer)?;
        if self.len() != seen {
            return Err(Error::InvalidArgument(
                "the Gated DeltaNet state was lost (a long block cut short): read the sequence again"
                    .into(),
            ));
        }
        let (out, rows, last) = layer.run(x, parents, &self.committed)?;
        let replayable = parents.len() <= STASH_ROWS;
        self.ledger.push(parents, replayable);
        self.rows = replayable.then_some(rows);
        self.last = last;
        Ok(out)
    }

    /// Fold the pending rows into the committed state (all of them: the caller has moved past
    /// them), or start over where they cannot be replayed.
    fn commit_first(&mut self, layer: &GatedDeltaNet) -> Result<()> {
        let fold = self.ledger.take_fold();
        if fold.restart {
            self.committed = self.zero.clone();
        }
        let (rows, last) = (self.rows.take(), self.last.take());
        if fold.path.is_empty() {
            return Ok(());
        }
        if let (true, Some(last)) = (fold.whole, last) {
            self.committed = last;
            return Ok(());
        }
        // The kernels fold a path from a root; a whole block that is no chain (a tree nobody
        // kept a path of) is replayed row by row on the host only.
        match &rows {
            Some(r @ Rows::Host(_)) => {
                self.committed = layer.replay(&self.committed, r, &fold.path)?;
            }
            Some(r @ Rows::Device(_)) if fold.chain => {
                self.committed = layer.replay(&self.committed, r, &fold.path)?;
            }
            _ => self.reset(),
        }
        Ok(())
    }

    /// Keep the rows seen up to `len` ([`BlockLedger::truncate`]). Returns the rows kept.
    pub fn truncate(&mut self, len: usize) -> usize {
        self.ledger.truncate(len)
    }

    /// Of the pending block, whose first row follows the committed rows at `base`, keep the rows
    /// `rows` (a path from a root, in order) as the sequence's next rows ([`BlockLedger::keep`]).
    pub fn keep(&mut self, base: usize, rows: &[usize]) -> Result<()> {
        self.ledger.keep(base, rows)
    }

    /// Forget the sequence.
    pub fn reset(&mut self) {
        self.committed = self.zero.clone();
        self.ledger.reset();
        self.rows = None;
        self.last = None;
    }
}

fn no_kernels() -> Error {
    Error::Device("a Gated DeltaNet state on the GPU for a layer without its GPU kernels".into())
}

#[cfg(feature = "cuda")]
pub(crate) mod selftest;

#[cfg(test)]
mod tests {
    use super::{BlockLedger, Fold};

    fn chain(n: usize) -> Vec<Option<usize>> {
        (0..n).map(|i| i.checked_sub(1)).collect()
    }

    #[test]
    fn a_chain_is_folded_whole_when_the_sequence_moves_past_it() {
        let mut l = BlockLedger::default();
        l.push(&chain(3), true);
        assert_eq!(l.len(), 3);
        let f = l.take_fold();
        assert_eq!(
            (f.path, f.whole, f.chain, f.restart),
            (vec![0, 1, 2], true, true, false)
        );
        assert_eq!(l.len(), 3);
        // Nothing pending: an empty fold.
        assert!(l.take_fold().path.is_empty());
    }

    #[test]
    fn a_kept_path_of_a_tree_is_what_is_folded() {
        let mut l = BlockLedger::default();
        l.push(&chain(2), true);
        l.take_fold();
        // Rows 0 and 1 roots' children: 0 -> 2 -> 4, 1 -> 3.
        let tree = [None, None, Some(0), Some(1), Some(2)];
        l.push(&tree, true);
        assert!(l.keep(2, &[0, 3]).is_err(), "3 is not 0's child");
        assert!(l.keep(1, &[0]).is_err(), "the block starts at 2");
        l.keep(2, &[0, 2, 4]).unwrap();
        assert_eq!(l.len(), 5);
        let f = l.take_fold();
        assert_eq!(
            (f.path.clone(), f.whole, f.chain),
            (vec![0, 2, 4], false, true)
        );
        assert!(f.foldable());
        // A tree with no path kept cannot be folded.
        l.push(&tree, true);
        let f = l.take_fold();
        assert!(!f.chain && !f.foldable());
    }

    #[test]
    fn truncation_keeps_a_chain_prefix_or_starts_over() {
        let mut l = BlockLedger::default();
        l.push(&chain(4), true);
        assert_eq!(l.truncate(2), 2);
        assert_eq!(l.take_fold().path, vec![0, 1]);
        // Into the folded rows: the states are gone, start over from the empty state.
        l.push(&chain(3), true);
        assert_eq!(l.truncate(1), 0);
        assert_eq!(
            l.take_fold(),
            Fold {
                restart: true,
                chain: true,
                ..Fold::default()
            }
        );
        // A block whose inputs were not kept cannot be cut.
        l.push(&chain(5), false);
        assert_eq!(l.truncate(3), 0);
        assert!(l.take_fold().restart);
    }

    #[test]
    fn a_block_without_its_inputs_kept_starts_over_on_keep() {
        let mut l = BlockLedger::default();
        l.push(&chain(6), false);
        l.keep(0, &[0, 1]).unwrap();
        assert_eq!(l.len(), 0);
        assert!(l.take_fold().restart);
    }
}
