//! Running a pass: the inputs placed, the per-pass metadata written, the layers launched (from a
//! captured graph where the shape was seen before), the logits and hidden states handed back; and
//! compacting the caches after a tree walk.

use super::*;

impl GpuStep {
    /// Run one pass: the block's K/V written to the cache rows `prefix..prefix + n` (the
    /// caller advances the cache), logits of `logits_rows` `[m, vocab]`, hidden states of
    /// `hidden_layers` `[n, hidden]` each.
    pub fn forward(&mut self, input: &StepInput) -> Result<(Option<Tensor>, Vec<Tensor>)> {
        let n = input.tokens.len();
        let m = input.logits_rows.len();
        // Key tables rounded up to a power of two wide, so that trees share graphs.
        let width = input.keys.width().next_power_of_two().max(2);
        let max_count = (0..n).map(|i| input.keys.count(i)).max().unwrap_or(0);
        let wide = self.wide_pass(n, m);
        // Attention chunks: by rank on the batch-invariant path, by cache row on the wide one.
        let chunks = match wide && self.wide_attention() {
            true => crate::gpu::attention::wide_chunks(input.keys),
            false => crate::gpu::attention::chunks_upto(max_count),
        }
        .next_power_of_two();
        let meta = Meta::new(n, width);
        let mut host = vec![0u32; meta.len];
        host[meta.ids..meta.ids + n].copy_from_slice(input.tokens);
        for (i, &p) in input.positions.iter().enumerate() {
            host[meta.pos + i] = p as u32;
            host[meta.slots + i] = (input.prefix + i) as u32;
            host[meta.out_slots + i] = u32::MAX; // -1: no logits
        }
        for (slot, &r) in input.logits_rows.iter().enumerate() {
            host[meta.out_slots + r] = slot as u32;
        }
        host[meta.table..meta.gdn].copy_from_slice(&input.keys.packed_to(width));
        let branching = match (&input.gdn, &self.linear) {
            (Some(g), _) => self.place_fold(g, n, &mut host[meta.gdn..])?,
            (None, Some(_)) => {
                return Err(Error::InvalidArgument(
                    "a hybrid model's GPU pass without its rows' parents".into(),
                ))
            }
            (None, None) => false,
        };
        self.ensure(n.max(m), chunks, meta.len, input.hidden_layers.len())?;
        self.ensure_stash()?;
        let bufs = self.bufs.as_mut().expect("ensured");
        self.stream
            .memcpy_htod(&host, &mut bufs.meta.slice_mut(..meta.len))
            .map_err(driver)?;
        let rows = match input.inputs {
            Some(rows) => {
                let rows = rows.to_dtype(candle_core::DType::F32)?.contiguous()?;
                if rows.dims() != [n, self.h] {
                    return Err(Error::InvalidArgument(format!(
                        "GPU step: input rows {:?} for a pass of {n} rows of {}",
                        rows.dims(),
                        self.h
                    )));
                }
                self.place_inputs(&rows)?;
                Some(rows)
            }
            None => None,
        };

        let bits = layer_bits(input.hidden_layers);
        let key = GraphKey {
            n,
            m,
            width,
            chunks,
            hidden: bits.unwrap_or(0),
            embed: input.inputs.is_none(),
            chain: 0,
            branching,
        };
        self.wide_now = wide;
        self.branching_now = branching;
        let graphed = self.graphs_on
            && n <= GRAPH_MAX_ROWS
            && !(wide && self.wide_graphs_failed)
            && bits.is_some_and(|b| b == 0 || !self.hidden_graphs_failed);
        // A shape runs eagerly the first time it is seen, from a graph after that.
        let first_sight = graphed && self.seen.insert(key);
        if graphed && (first_sight || !self.graphs.contains_key(&key)) {
            self.cold += 1;
        }
        if graphed && !first_sight {
            match self.replay(key, meta, input.hidden_layers) {
                Ok(out) => return Ok(out),
                // The graph may have folded the Gated DeltaNet states already: not again.
                Err(e) if self.linear.is_some() => {
                    self.graphs_failed(&e);
                    return Err(e);
                }
                Err(e) if wide => {
                    // Passes through cuBLAS run eagerly; the others keep their graphs.
                    self.wide_graphs_failed = true;
                    self.graphs.remove(&key);
                    eprintln!(
                        "treespec: CUDA graph capture of a pass through cuBLAS failed, running those eagerly: {e}"
                    );
                }
                Err(e) if key.hidden != 0 => {
                    // Passes that copy hidden states out run eagerly; the others keep
                    // their graphs.
                    self.hidden_graphs_failed = true;
                    self.graphs.remove(&key);
                    eprintln!(
                        "treespec: CUDA graph capture of a pass with hidden states failed, running those eagerly: {e}"
                    );
                }
                Err(e) => self.graphs_failed(&e),
            }
            // A replay that failed after its graph ran has written over the input rows:
            // back into place for the eager pass.
            if let Some(rows) = &rows {
                self.place_inputs(rows)?;
            }
        }
        let mut hidden = HiddenOut::Fresh(vec![None; input.hidden_layers.len()]);
        let logits = if m > 0 {
            let mut out = self
                .stream
                .alloc_zeros::<f32>(m.div_ceil(4) * 4 * self.vocab)
                .map_err(driver)?;
            let out_ptr = out.device_ptr_mut(&self.stream).0;
            self.launch_all(key, meta, out_ptr, input.hidden_layers, &mut hidden)?;
            Some(self.wrap(out, m)?)
        } else {
            self.launch_all(key, meta, 0, input.hidden_layers, &mut hidden)?;
            None
        };
        let hidden = match hidden {
            HiddenOut::Fresh(slots) => slots.into_iter().flatten().collect(),
            HiddenOut::Buffers(_) => vec![],
        };
        Ok((logits, hidden))
    }

    /// A capture failed: graphs off for good (every pass and chain runs eagerly), one line
    /// saying why.
    pub(super) fn graphs_failed(&mut self, e: &Error) {
        self.graphs_on = false;
        self.graphs_failed = true;
        self.graphs.clear();
        eprintln!("treespec: CUDA graph capture failed, running passes eagerly: {e}");
    }

    /// Replay (capturing first if needed) the pass of shape `key`; its logits (`[m, vocab]`,
    /// copied out of the graph's buffer) unless `m` is 0.
    /// Replay the pass of shape `key` (capturing it first if it is not yet), its hidden
    /// states of `hidden_layers` (the layers `key.hidden` holds) copied out after it.
    pub(super) fn replay(
        &mut self,
        key: GraphKey,
        meta: Meta,
        hidden_layers: &[usize],
    ) -> Result<(Option<Tensor>, Vec<Tensor>)> {
        let (logits_ptr, hidden_ptrs) = {
            let bufs = self.bufs.as_ref().expect("ensured");
            let s = &self.stream;
            (
                bufs.logits.device_ptr(s).0,
                bufs.hidden[..hidden_layers.len()]
                    .iter()
                    .map(|b| b.device_ptr(s).0)
                    .collect::<Vec<_>>(),
            )
        };
        if !self.graphs.contains_key(&key) {
            if self.graphs.len() >= GRAPH_CACHE {
                self.graphs.clear();
            }
            let graph = capture(&self.stream, || {
                let mut into = HiddenOut::Buffers(hidden_ptrs.clone());
                self.launch_all(key, meta, logits_ptr, hidden_layers, &mut into)
            })?;
            // (A pass fed input rows accumulates into them: not replayed to profile.)
            if let Some(times) = profile_replays().filter(|_| key.embed) {
                // TREESPEC_STEP_PROFILE=N: the graph alone, N replays back to back.
                eprintln!(
                    "treespec: graph of {} rows ({} logits rows, {} attention chunks): {:.1} us a replay on the GPU",
                    key.n,
                    key.m,
                    key.chunks,
                    replay_micros(&self.stream, &graph, times)?
                );
            }
            self.graphs.insert(key, Graph(graph));
        }
        let graph = &self.graphs[&key].0;
        match &self.replay_on {
            Some(r) => {
                r.ready.record(&self.stream).map_err(driver)?;
                r.stream.wait(&r.ready).map_err(driver)?;
                // SAFETY: the graph is alive (owned by self.graphs) and belongs to this
                // context, as does the stream.
                unsafe { result::graph::launch(graph.cu_graph_exec(), r.stream.cu_stream()) }
                    .map_err(driver)?;
                r.done.record(&r.stream).map_err(driver)?;
                self.stream.wait(&r.done).map_err(driver)?;
            }
            None => graph.launch().map_err(driver)?,
        }
        let bufs = self.bufs.as_ref().expect("ensured");
        let mut hidden = Vec::with_capacity(hidden_layers.len());
        for b in &bufs.hidden[..hidden_layers.len()] {
            let copy = self
                .stream
                .clone_dtod(&b.slice(..key.n * self.h))
                .map_err(driver)?;
            hidden.push(crate::gpu::tensor_from_slice(
                &self.dev,
                copy,
                (key.n, self.h),
            ));
        }
        if key.m == 0 {
            return Ok((None, hidden));
        }
        let out = self
            .stream
            .clone_dtod(&bufs.logits.slice(..key.m * self.vocab))
            .map_err(driver)?;
        Ok((Some(self.wrap(out, key.m)?), hidden))
    }

    pub(super) fn wrap(&self, out: CudaSlice<f32>, m: usize) -> Result<Tensor> {
        let rows = out.len() / self.vocab;
        let t = crate::gpu::tensor_from_slice(&self.dev, out, (rows, self.vocab));
        Ok(if rows == m { t } else { t.narrow(0, 0, m)? })
    }

    /// Grow the buffers to `n` rows, `chunks` attention chunks, `meta_len` metadata
    /// entries and `hidden` hidden-state slots (dropping captured graphs, whose addresses
    /// change).
    pub(super) fn ensure(
        &mut self,
        n: usize,
        chunks: usize,
        meta_len: usize,
        hidden: usize,
    ) -> Result<()> {
        let rows = n.div_ceil(4) * 4;
        // Buffers made before the crossover moved down (`set_wide_from`) may lack the f16
        // rows a wide pass of their size needs.
        let wants_half = |rows: usize| self.wide.as_ref().is_some_and(|w| rows >= w.from);
        if let Some(b) = &self.bufs {
            if b.rows >= rows
                && b.chunks >= chunks
                && b.meta_len >= meta_len
                && b.hidden.len() >= hidden
                && (b.half.is_some() || !wants_half(b.rows))
            {
                return Ok(());
            }
        }
        let (rows, chunks, meta_len, hidden) = match &self.bufs {
            Some(b) => (
                b.rows.max(rows),
                b.chunks.max(chunks),
                b.meta_len.max(meta_len),
                b.hidden.len().max(hidden),
            ),
            None => (rows.max(4), chunks.max(8), meta_len.max(64), hidden),
        };
        self.graphs.clear();
        self.bufs = None;
        let s = &self.stream;
        let gdn_out = self.linear.as_ref().map_or(0, |(l, _)| l.v_heads * l.v_dim);
        let mixed = (self.nh * self.hd).max(gdn_out);
        let qb = qblocks(self.h.max(self.ffn).max(mixed));
        let proj = self.qkv_width.max(2 * self.ffn).max(self.h);
        let alloc = |len: usize| s.alloc_zeros::<f32>(len).map_err(driver);
        self.bufs = Some(Buffers {
            rows,
            chunks,
            meta_len,
            meta: s.alloc_zeros::<u32>(meta_len).map_err(driver)?,
            x: alloc(rows * self.h)?,
            q8: s.alloc_zeros::<u8>(rows * qb * Q8_BYTES).map_err(driver)?,
            proj: alloc(rows * proj)?,
            q: alloc(self.nh * rows * self.hd)?,
            att: alloc(rows * mixed)?,
            part: alloc(rows * self.nh * chunks * (self.hd + 2))?,
            // Graphs write their logits here: up to GRAPH_MAX_ROWS rows, padded to four.
            logits: alloc(rows.min(GRAPH_MAX_ROWS) * self.vocab)?,
            // And their hidden states here.
            hidden: (0..hidden)
                .map(|_| alloc(rows.min(GRAPH_MAX_ROWS) * self.h))
                .collect::<Result<_>>()?,
            half: match wants_half(rows) {
                true => Some(s.alloc_zeros::<u16>(rows * qb * 32).map_err(driver)?),
                false => None,
            },
            mmq: match self.tensor_cores && self.mmq {
                true => Some(self.mmq_scratch(rows)?),
                false => None,
            },
            gdn_u: match &self.linear {
                Some((l, _)) if rows > GDN_STASH_ROWS => Some(alloc(rows * l.conv_channels())?),
                _ => None,
            },
        });
        Ok(())
    }

    /// The K-quant family's workspace for passes of up to `rows` rows: room for the
    /// largest split pass of any product of the step.
    pub(super) fn mmq_scratch(&self, rows: usize) -> Result<MmqScratch> {
        let probe = MmqScratch::new(&self.stream, 0)?;
        let mut shapes = HashSet::new();
        for l in &self.layers {
            for group in [&l.qkv, &l.gate_up] {
                let cols = group[0].0.cols;
                shapes.insert((group.iter().map(|(m, _)| m.rows).sum::<usize>(), cols));
                shapes.extend(group.iter().map(|(m, _)| (m.rows, m.cols)));
            }
            shapes.insert((l.o.rows, l.o.cols));
            shapes.insert((l.down.rows, l.down.cols));
        }
        shapes.insert((self.lm_head.rows, self.lm_head.cols));
        let need = shapes
            .iter()
            .flat_map(|&(r, c)| {
                let probe = &probe;
                (1..=rows).map(move |n| probe.need(r, c, n))
            })
            .max()
            .unwrap_or(0);
        drop(probe);
        MmqScratch::new(&self.stream, need)
    }

    /// Every launch of a pass of shape `key`: `key.n` rows, `key.m` of them to `logits` (a
    /// `[m, vocab]` buffer, rows padded to four), from the embedding or from rows already in
    /// place (`key.embed`); hidden states of `hidden_layers` copied out to `hidden`.
    pub(super) fn launch_all(
        &self,
        key: GraphKey,
        meta: Meta,
        logits: u64,
        hidden_layers: &[usize],
        hidden: &mut HiddenOut,
    ) -> Result<()> {
        let (n, m) = (key.n, key.m);
        let b = self.bufs.as_ref().expect("ensured");
        let x = b.x.device_ptr(&self.stream).0;
        let q8 = b.q8.device_ptr(&self.stream).0;
        let at = self.meta_at(meta, 0);
        self.mark("gdn commit")?;
        self.gdn_commit(at.gdn)?;
        if key.embed {
            self.mark("embed")?;
            self.embed(n, at.ids, x)?;
        }
        let (pending_hidden, delta) =
            self.launch_layers(n, key.chunks, at, hidden_layers, hidden)?;
        // x += last down output (unless its product added it); final norm of the logits rows
        // into their slots, as f16 rows too where the LM head goes wide.
        let (q8, f16) = self.rows_for(m, std::iter::once(&self.lm_head), q8);
        self.mark("norms")?;
        self.norm_q8(n, x, delta, self.norm, at.out_slots, (q8, f16), self.h)?;
        if let Some(prev) = pending_hidden {
            self.copy_hidden(n, x, prev, hidden_layers, hidden)?;
        }
        if m > 0 {
            self.mark("lm head")?;
            self.matmul(
                &[&self.lm_head],
                (q8, qblocks(self.h), f16 != 0),
                (logits, self.vocab),
                m,
            )?;
        }
        self.clock_pass(n)
    }

    /// Device addresses of the per-pass values of a metadata block laid out as `meta`,
    /// starting `first` u32 entries into the metadata buffer.
    pub(super) fn meta_at(&self, meta: Meta, first: usize) -> MetaAt {
        let base = self
            .bufs
            .as_ref()
            .expect("ensured")
            .meta
            .device_ptr(&self.stream)
            .0;
        let at = |off: usize| base + ((first + off) * 4) as u64;
        MetaAt {
            ids: at(meta.ids),
            pos: at(meta.pos),
            slots: at(meta.slots),
            out_slots: at(meta.out_slots),
            table: at(meta.table),
            width: meta.width,
            gdn: at(meta.gdn),
            parents: at(meta.gdn + GDN_FOLD),
        }
    }

    /// Queue the copy of a pass's input rows (`[n, h]` f32, contiguous) into place.
    pub(super) fn place_inputs(&self, rows: &Tensor) -> Result<()> {
        let bufs = self.bufs.as_ref().expect("ensured");
        let src = tensor_ptr(rows, &self.stream).map_err(Error::Device)?;
        let dst = bufs.x.device_ptr(&self.stream).0;
        // SAFETY: x holds at least n rows of h f32 (ensured); rows is n x h f32 on candle's
        // stream, this one, whose memory is freed in stream order (cudarc frees
        // asynchronously on the slice's stream), so after the copy.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                dst,
                src,
                rows.elem_count() * 4,
                self.stream.cu_stream(),
            )
        }
        .map_err(driver)?;
        Ok(())
    }

    pub(super) fn embed(&self, n: usize, ids: u64, x: u64) -> Result<()> {
        let h = self.h;
        match &self.embed {
            Embed::Dense(table) => {
                let mut b = Launch::new(&self.f.gather_rows);
                let h_i = h as i32;
                b.arg(table).arg(&ids).arg(&x).arg(&h_i);
                let cfg = LaunchConfig {
                    grid_dim: (n as u32, (h as u32).div_ceil(THREADS), 1),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: ids below the vocabulary (checked by the decoder), x holds n rows.
                unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
            }
            Embed::Quantized {
                ptr,
                dtype,
                row_bytes,
                ..
            } => {
                let f = self.f.get_rows.as_ref().expect("loaded with the embedding");
                let (block, grid_y) = get_rows_shape(*dtype, h);
                let mut b = self.stream.launch_builder(f);
                let (ne00, nb01) = (h as i64, *row_bytes);
                b.arg(ptr).arg(&ids).arg(&x).arg(&ne00).arg(&nb01);
                let cfg = LaunchConfig {
                    grid_dim: (n as u32, grid_y as u32, 1),
                    block_dim: (block as u32, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: candle's get_rows kernel with the arguments candle passes it.
                unsafe { b.launch(cfg) }.map_err(driver)?;
            }
        }
        Ok(())
    }

    /// Copy the `n x h` hidden states at `x` (layer `layer`'s output) to every slot of
    /// `wanted` that asks for that layer.
    pub(super) fn copy_hidden(
        &self,
        n: usize,
        x: u64,
        layer: usize,
        wanted: &[usize],
        out: &mut HiddenOut,
    ) -> Result<()> {
        let copy = |dst: u64| {
            // SAFETY: both buffers hold at least n x hidden f32; same stream.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    dst,
                    x,
                    n * self.h * 4,
                    self.stream.cu_stream(),
                )
            }
            .map_err(driver)
        };
        let slots = wanted.iter().enumerate().filter(|(_, &w)| w == layer);
        match out {
            HiddenOut::Fresh(tensors) => {
                let mut dst = self.stream.alloc_zeros::<f32>(n * self.h).map_err(driver)?;
                copy(dst.device_ptr_mut(&self.stream).0)?;
                let t = crate::gpu::tensor_from_slice(&self.dev, dst, (n, self.h));
                for (slot, _) in slots {
                    tensors[slot] = Some(t.clone());
                }
            }
            HiddenOut::Buffers(ptrs) => {
                for (slot, _) in slots {
                    copy(ptrs[slot])?;
                }
            }
        }
        Ok(())
    }

    /// Of the cache rows from `base` on, keep those at offsets `rows` (strictly ascending),
    /// moved to `base, base + 1, ...`: K and V of every layer and their f16 shadows, in one
    /// launch (`kv_keep`) on candle's stream. The caller sets the caches' lengths.
    pub fn keep(&mut self, base: usize, rows: &[usize]) -> Result<()> {
        if crate::arch::kv_cache::KvCache::in_place(rows) {
            return Ok(());
        }
        if rows.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::InvalidArgument("keep: rows must ascend".into()));
        }
        let idx = rows
            .iter()
            .map(|&r| u32::try_from(r))
            .collect::<std::result::Result<Vec<u32>, _>>()
            .map_err(|_| Error::InvalidArgument("keep: a row past any cache".into()))?;
        let idx = self.stream.clone_htod(&idx).map_err(driver)?;
        let idx_ptr = idx.device_ptr(&self.stream).0;
        let table = self.kv_table.device_ptr(&self.stream).0;
        let (count, base_i, hd_i) = (rows.len() as i32, base as i32, self.hd as i32);
        let mut b = Launch::new(&self.f.kv_keep);
        b.arg(&table)
            .arg(&idx_ptr)
            .arg(&count)
            .arg(&base_i)
            .arg(&self.kv_stride)
            .arg(&hd_i);
        let attention = self.layers.iter().filter(|l| l.gdn.is_none()).count();
        if attention == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (attention as u32, 2, self.nkv as u32),
            block_dim: (self.hd as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the table holds every layer's caches (shadows or null); the rows ascend,
        // so each thread's moves read before they overwrite; base + row lies inside the
        // caches (the decoder checked it against the valid rows).
        unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
        // The index buffer is freed in stream order after the launch.
        drop(idx);
        Ok(())
    }

    /// Logits of `normed` (`[m, h]` f32 rows, already through the final norm) from the f16
    /// copy of the LM head (one cuBLAS GEMM: a drafter's block of rows, which need not be
    /// bit-exact); `None` where the step has no copy of it.
    pub fn lm_head_copy(&self, normed: &Tensor) -> Result<Option<Tensor>> {
        let lm = &self.lm_head;
        let Some(wide) = self.wide.as_ref().filter(|w| w.has(lm.ptr)) else {
            return Ok(None);
        };
        let (m, h) = normed.dims2()?;
        if h != lm.cols || m == 0 {
            return Err(Error::InvalidArgument(format!(
                "LM head of rows of {}: input [{m}, {h}]",
                lm.cols
            )));
        }
        let x16 = normed.to_dtype(candle_core::DType::F16)?.contiguous()?;
        let x = crate::gpu::tensor_ptr::<half::f16>(&x16, &self.stream).map_err(Error::Device)?;
        let mut out = self
            .stream
            .alloc_zeros::<f32>(m * lm.rows)
            .map_err(driver)?;
        let dst = (out.device_ptr_mut(&self.stream).0, lm.rows);
        let stack = [(lm.ptr, lm.rows, lm.cols)];
        wide.product(&self.stream, &stack, (0, 0), (x, true), dst, m, Out::Set)?;
        Ok(Some(crate::gpu::tensor_from_slice(
            &self.dev,
            out,
            (m, lm.rows),
        )))
    }
}
