//! An MTP head's greedy chain as one launch: the head's step (its block as the one layer) with
//! the head's input stage and LM head in front of and behind the block, `depth` times, each
//! depth's token picked on the device and fed to the next, so that a chain of k drafted tokens
//! costs one graph replay and one copy back instead of k round trips through candle's ops.
//!
//! From the block output `y` of the last committed position (in `x`), or first a catch-up pass
//! over `n` positions `start..start + n` not yet run through the head (the target's hidden states
//! `g` with their tokens: `x = input_proj([Q8(hidden_norm(g)) | Q8(token_norm(embed(token)))])`,
//! the block over those rows, their K/V into the cache) whose last row's output is `y`:
//!
//! ```text
//! depth 1:       q8 = Q8(final_norm(y));  logits = lm_head(q8);  top-k;  id = vocab[top 1]
//! depth d > 1:   e = embed(id)                                   (the token depth d-1 took)
//!                q8 = [Q8(hidden_norm(final_norm(y))) | Q8(token_norm(e))]   (order per layout)
//!                x = input_proj(q8);  the block at position start + n + d - 2 (K/V to that slot)
//!                y = x;  then as depth 1
//! ```
//!
//! The caller counts the catch-up's positions in the head's cache; the chain's K/V slots are
//! past them and are not counted, so the next catch-up pass writes over them.

use super::*;
use crate::arch::visible::VisibleKeys;
use crate::gpu::step::ChainStart;
use crate::gpu::topk::{depths, launch_top_k, TopKFuncs, TopKScratch};
use crate::tree::DepthTopK;

/// The head's weights and kernels beyond the block's, and the chain's buffers.
pub(super) struct HeadChain {
    hidden_norm: u64,
    token_norm: u64,
    input_proj: Mat,
    lm_head: Mat,
    /// Token ids of `lm_head`'s rows (0: the rows are the target's vocabulary).
    vocab: u64,
    hidden_first: bool,
    norm2_q8: CudaFunction,
    next_token: CudaFunction,
    top_k: TopKFuncs,
    bufs: Option<ChainBuffers>,
    _keep: Vec<Tensor>,
}

/// Buffers of chains up to `depth` deep.
struct ChainBuffers {
    depth: usize,
    logits: CudaSlice<f32>,
    scratch: TopKScratch,
    /// Per depth, the top-k words ([`launch_top_k`] with k = [`TOP_K_MAX`] room).
    out: CudaSlice<u32>,
}

/// Words a depth's top-k takes in the output buffer (room for the largest k).
const DEPTH_WORDS: usize = 2 * crate::gpu::TOP_K_MAX + 1;

impl GpuStep {
    /// Give the step an MTP head's input stage and LM head rows (see the module documentation),
    /// or say why chains cannot run on it.
    pub fn set_head_stage(&mut self, s: &HeadStage) -> std::result::Result<(), String> {
        let h = self.h;
        if self.layers.len() != 1 {
            return Err("the step is not one head block".into());
        }
        if !h.is_multiple_of(32) {
            return Err(format!("hidden size {h} is not a multiple of 32"));
        }
        let (input_proj, ib) = mat(s.input_proj, "the head's input projection")?;
        let (lm_head, lb) = mat(s.lm_head, "the head's LM head rows")?;
        if ib.is_some() || lb.is_some() {
            return Err("a bias on the head's input projection or LM head".into());
        }
        if (input_proj.rows, input_proj.cols) != (h, 2 * h) || lm_head.cols != h {
            return Err("the head's input projection or LM head has an unexpected shape".into());
        }
        // The concatenated input rows live in the step's activation buffer, sized for its widest
        // row (`ensure`).
        if qblocks(2 * h) > qblocks(h.max(self.ffn).max(self.nh * self.hd)) {
            return Err("the head's input row is wider than the step's activation rows".into());
        }
        let mut keep = vec![];
        let mut ptr = |t: &Tensor| -> std::result::Result<u64, String> {
            let t = t
                .to_dtype(candle_core::DType::F32)
                .and_then(|t| t.contiguous())
                .map_err(|e| e.to_string())?;
            let p = tensor_ptr(&t, &self.stream)?;
            keep.push(t);
            Ok(p)
        };
        let (hidden_norm, token_norm) = (ptr(s.hidden_norm)?, ptr(s.token_norm)?);
        let vocab = match s.vocab {
            Some(v) => {
                if v.dtype() != candle_core::DType::U32 || v.dims() != [lm_head.rows] {
                    return Err("the draft vocabulary does not match the LM head rows".into());
                }
                let v = v.contiguous().map_err(|e| e.to_string())?;
                let (st, l) = v.storage_and_layout();
                let Storage::Cuda(cs) = &*st else {
                    return Err("the draft vocabulary is not on the GPU".into());
                };
                let slice = cs.as_cuda_slice::<u32>().map_err(|e| e.to_string())?;
                let p = slice.device_ptr(&self.stream).0 + (l.start_offset() * 4) as u64;
                drop(st);
                keep.push(v);
                p
            }
            None => 0,
        };
        let dev = &self.dev;
        let step = |name: &str| -> std::result::Result<CudaFunction, String> {
            crate::gpu::modules::func(dev, crate::gpu::modules::Module::Rows, name)
                .map_err(|e| e.to_string())
        };
        let (norm2_q8, next_token) = (step("norm2_q8")?, step("next_token")?);
        let top_k = TopKFuncs::load(dev).map_err(|e| e.to_string())?;
        for m in [&input_proj, &lm_head] {
            for kernel in Dp4a::ALL {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    self.f.mmvq.entry((m.tag, kernel))
                {
                    slot.insert(mmvq_func(dev, m.tag, kernel, false).map_err(|e| e.to_string())?);
                }
            }
        }
        self.graphs.clear();
        self.head = Some(HeadChain {
            hidden_norm,
            token_norm,
            input_proj,
            lm_head,
            vocab,
            hidden_first: s.hidden_first,
            norm2_q8,
            next_token,
            top_k,
            bufs: None,
            _keep: keep,
        });
        Ok(())
    }

    /// Draft a greedy chain of `depth` tokens (see the module documentation) `from` a block
    /// output or after a catch-up pass ([`ChainStart`]; its first position `start`): per depth
    /// the `k` (1..=[`TOP_K_MAX`]) most probable rows of the head's LM head, as indices into
    /// those rows, with their log-probabilities. Needs [`Self::set_head_stage`].
    pub fn greedy_chain(
        &mut self,
        from: ChainStart,
        start: usize,
        depth: usize,
        k: usize,
    ) -> Result<Vec<DepthTopK>> {
        // A chain's passes never take the wide products (their graph keys do not say so).
        self.wide_now = false;
        // The head's block is full attention: no Gated DeltaNet walk, so no saved states.
        self.branching_now = false;
        let Some(head) = &self.head else {
            return Err(Error::Device("the step has no MTP head stage".into()));
        };
        let (rows, allocated) = (head.lm_head.rows, head.bufs.as_ref().map_or(0, |b| b.depth));
        if !(1..=crate::gpu::TOP_K_MAX).contains(&k) || depth == 0 {
            return Err(Error::InvalidArgument(format!(
                "a chain of {depth} depths with top-{k}"
            )));
        }
        let (input, tokens) = match from {
            ChainStart::Row(y) => (y, &[][..]),
            ChainStart::CatchUp { hidden, tokens } => (hidden, tokens),
        };
        let n = tokens.len();
        let input = input.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let catch_up = matches!(from, ChainStart::CatchUp { .. });
        if input.dims() != [n.max(1), self.h] || (catch_up && (n == 0 || start == 0)) {
            return Err(Error::InvalidArgument(format!(
                "MTP chain: start rows {:?} for {n} tokens at position {start}",
                input.dims()
            )));
        }
        if n > GRAPH_MAX_ROWS {
            return Err(Error::InvalidArgument(format!(
                "MTP chain: a catch-up of {n} rows (at most {GRAPH_MAX_ROWS})"
            )));
        }
        let capacity = self.kv_stride as usize / self.hd;
        let steps = depth - 1;
        let first = start + n; // the chain's first block position
        if first + steps > capacity {
            return Err(Error::ContextOverflow {
                prompt: first + steps,
                context: capacity,
            });
        }
        // The catch-up pass's per-pass values, then one block a chain step.
        let (cu, meta) = (Meta::new(n, 2), Meta::new(1, 2));
        let cu_len = if n > 0 { cu.len } else { 0 };
        let mut host = vec![0u32; cu_len + steps.max(1) * meta.len];
        if n > 0 {
            host[cu.ids..cu.ids + n].copy_from_slice(tokens);
            for r in 0..n {
                host[cu.pos + r] = (start + r) as u32;
                host[cu.slots + r] = (start + r) as u32;
                host[cu.out_slots + r] = if r + 1 == n { 0 } else { u32::MAX };
            }
            let keys = VisibleKeys::causal(n, start);
            host[cu.table..cu.gdn].copy_from_slice(&keys.packed_to(2));
        }
        for (j, block) in host[cu_len..].chunks_mut(meta.len).take(steps).enumerate() {
            let p = first + j;
            block[meta.pos] = p as u32;
            block[meta.slots] = p as u32;
            block[meta.out_slots] = 0;
            block[meta.table..meta.gdn].copy_from_slice(&VisibleKeys::one_causal(p).packed_to(2));
        }
        let chunks = crate::gpu::attention::chunks_upto(first + steps).next_power_of_two();
        self.ensure(n.max(1), chunks, host.len(), 0)?;
        if allocated < depth {
            let s = &self.stream;
            let bufs = ChainBuffers {
                depth,
                logits: s.alloc_zeros::<f32>(rows).map_err(driver)?,
                scratch: TopKScratch::new(s, 1)?,
                out: s.alloc_zeros::<u32>(depth * DEPTH_WORDS).map_err(driver)?,
            };
            self.graphs.clear();
            if let Some(h) = &mut self.head {
                h.bufs = Some(bufs);
            }
        }
        let bufs = self.bufs.as_mut().expect("ensured");
        self.stream
            .memcpy_htod(&host, &mut bufs.meta.slice_mut(..host.len()))
            .map_err(driver)?;
        self.place_inputs(&input)?;
        let key = GraphKey {
            n,
            m: k,
            width: 2,
            chunks,
            hidden: 0,
            embed: false,
            chain: depth,
            branching: false,
        };
        let layout = ChainMeta { cu, meta, cu_len };
        if self.graphs_on {
            if !self.graphs.contains_key(&key) {
                if self.graphs.len() >= GRAPH_CACHE {
                    self.graphs.clear();
                }
                let graph = capture(&self.stream, || self.launch_chain(key, layout));
                let graph = match graph {
                    Ok(g) => g,
                    Err(e) => {
                        self.graphs_failed(&e);
                        return self.read_chain(key, layout, true);
                    }
                };
                // (A catch-up writes the head's cache: not replayed to profile.)
                if let Some(times) = profile_replays().filter(|_| n == 0) {
                    // Replays feed each other's last output back: fine for timing.
                    eprintln!(
                        "treespec: graph of an MTP chain of {depth} depths (top-{k}, {chunks} attention chunks): {:.1} us a replay on the GPU",
                        replay_micros(&self.stream, &graph, times)?
                    );
                    self.place_inputs(&input)?;
                }
                self.graphs.insert(key, Graph(graph));
            }
            self.graphs[&key].0.launch().map_err(driver)?;
            return self.read_chain(key, layout, false);
        }
        self.read_chain(key, layout, true)
    }

    /// Run the chain's launches now (`eager`) or after a replay, and copy its top-k back.
    fn read_chain(&self, key: GraphKey, meta: ChainMeta, eager: bool) -> Result<Vec<DepthTopK>> {
        if eager {
            self.launch_chain(key, meta)?;
        }
        let head = self.head.as_ref().expect("checked");
        let bufs = head.bufs.as_ref().expect("allocated");
        let words = self
            .stream
            .clone_dtoh(&bufs.out.slice(..key.chain * DEPTH_WORDS))
            .map_err(driver)?;
        let k = key.m;
        Ok(words
            .chunks(DEPTH_WORDS)
            .flat_map(|w| depths(&w[..2 * k + 1], k))
            .collect())
    }

    /// Every launch of a chain of `key.chain` depths with top-`key.m`, after a catch-up pass of
    /// `key.n` rows when that is not 0 (per-pass values laid out as `layout`).
    fn launch_chain(&self, key: GraphKey, layout: ChainMeta) -> Result<()> {
        let head = self.head.as_ref().expect("checked");
        let cb = head.bufs.as_ref().expect("allocated");
        let b = self.bufs.as_ref().expect("ensured");
        let s = &self.stream;
        let (x, proj) = (b.x.device_ptr(s).0, b.proj.device_ptr(s).0);
        let q8 = b.q8.device_ptr(s).0;
        let (logits, out) = (cb.logits.device_ptr(s).0, cb.out.device_ptr(s).0);
        let (h, k, n) = (self.h, key.m, key.n);
        // The input row's two halves: `half` blocks of exactly h values, then the rest of the
        // padded row.
        let (half, wide) = (h / 32, qblocks(2 * h));
        let (g_at, e_at) = match head.hidden_first {
            true => ((0, half), (half, wide - half)),
            false => ((half, wide - half), (0, half)),
        };
        let q8_at =
            |(first, blocks): (usize, usize)| (q8 + (first * Q8_BYTES) as u64, blocks, wide);
        let out_at = |d: usize| out + (d * DEPTH_WORDS * 4) as u64;
        let step_at =
            |d: usize| self.meta_at(layout.meta, layout.cu_len + (d - 1) * layout.meta.len);
        let mut none = HiddenOut::Buffers(vec![]);
        // The row depth 2 feeds back: the catch-up's last, else the one placed.
        let last = x + (n.saturating_sub(1) * h * 4) as u64;
        if n > 0 {
            // The catch-up: u = input_proj([hidden_norm(g) | token_norm(embed(token))]) for
            // each row, the block over them, then the final norm of the last row's output.
            let at = self.meta_at(layout.cu, 0);
            self.embed(n, at.ids, proj)?;
            self.norm_q8_blocks(n, x, 0, head.hidden_norm, 0, q8_at(g_at), h, 0)?;
            self.norm_q8_blocks(n, proj, 0, head.token_norm, 0, q8_at(e_at), h, 0)?;
            self.matmul(&[&head.input_proj], (q8, wide, false), (x, h), n)?;
            let (_, delta) = self.launch_layers(n, key.chunks, at, &[], &mut none)?;
            self.norm_q8(n, x, delta, self.norm, at.out_slots, (q8, 0), h)?;
        }
        // What the final norm adds: the block's last down output (never added by a wide
        // product: chains run on the exact kernels).
        let mut delta = proj;
        for d in 0..key.chain {
            // The block for depth d + 1 (depth 1 reads the caller's row or the catch-up's).
            if d > 0 {
                let at = step_at(d);
                self.embed(1, at.ids, proj)?;
                let from = if d == 1 { last } else { x };
                let (g, g_blocks, _) = q8_at(g_at);
                let mut bld = Launch::new(&head.norm2_q8);
                let (h_i, gb_i, group) = (h as i32, g_blocks as i32, self.act_group());
                bld.arg(&from)
                    .arg(&self.norm)
                    .arg(&head.hidden_norm)
                    .arg(&g)
                    .arg(&h_i)
                    .arg(&gb_i)
                    .arg(&self.eps)
                    .arg(&group);
                let cfg = LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (NORM_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: `from` holds a row of h f32, the norms h f32 each, q8 the wide row.
                unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
                self.norm_q8_blocks(1, proj, 0, head.token_norm, 0, q8_at(e_at), h, 0)?;
                self.matmul(&[&head.input_proj], (q8, wide, false), (x, h), 1)?;
                let (_, added) = self.launch_layers(1, key.chunks, at, &[], &mut none)?;
                delta = added;
            }
            // y = x (+ the block's last output); its final norm through the LM head rows (the
            // catch-up's already normed).
            if d > 0 || n == 0 {
                let delta = if d > 0 { delta } else { 0 };
                self.norm_q8(1, x, delta, self.norm, 0, (q8, 0), h)?;
            }
            let rows = head.lm_head.rows;
            self.matmul(&[&head.lm_head], (q8, qblocks(h), false), (logits, rows), 1)?;
            launch_top_k(s, &head.top_k, &cb.scratch, (logits, 1, rows), k, out_at(d))?;
            if d + 1 < key.chain {
                let next = step_at(d + 1).ids;
                let mut bld = Launch::new(&head.next_token);
                let top = out_at(d);
                bld.arg(&top).arg(&head.vocab).arg(&next);
                let cfg = LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (32, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: top holds the depth's words, vocab (when set) every row's id, next
                // is the next step's id slot.
                unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
            }
        }
        Ok(())
    }
}

/// Where a chain's per-pass values lie in the step's metadata buffer: the catch-up pass's block
/// (`cu_len` entries, 0 without one) first, then one `meta` block a chain step.
#[derive(Clone, Copy)]
struct ChainMeta {
    cu: Meta,
    meta: Meta,
    cu_len: usize,
}
