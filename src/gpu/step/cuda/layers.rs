//! One layer's launches: norm and quantise, q/k/v with RoPE into the cache, attention, the output
//! product, SwiGLU and the down product.

use super::*;

impl GpuStep {
    /// Every layer of a pass of `n` rows whose inputs are in `x` (`chunks` attention
    /// chunks, per-pass values at `meta`). Returns the last layer if its hidden state is
    /// wanted (copied out once the residual is added), and what the final norm adds to `x`:
    /// the last layer's down output left in `proj`, or nothing (0) where its product added
    /// it to `x` itself (a wide pass).
    pub(super) fn launch_layers(
        &self,
        n: usize,
        chunks: usize,
        meta: MetaAt,
        hidden_layers: &[usize],
        hidden: &mut HiddenOut,
    ) -> Result<(Option<usize>, u64)> {
        let b = self.bufs.as_ref().expect("ensured");
        let s = &self.stream;
        let p = |x: &CudaSlice<f32>| x.device_ptr(s).0;
        let (x, proj, q, att, part) = (p(&b.x), p(&b.proj), p(&b.q), p(&b.att), p(&b.part));
        let q8 = b.q8.device_ptr(s).0;
        let (pos, slots, table) = (meta.pos, meta.slots, meta.table);
        let (h, nh, nkv, hd) = (self.h, self.nh, self.nkv, self.hd);
        let n_i = n as i32;
        let mut pending_hidden: Option<usize> = None;
        // What the next norm adds to x: the previous product's output, or nothing where
        // that product added into x itself.
        let mut delta = 0u64;
        for (li, l) in self.layers.iter().enumerate() {
            // x += previous layer's down output (its residual), norm, quantise (Q8_1 rows
            // only where the product reading them does not go wide).
            let qkv_mats = l.qkv.iter().map(|(m, _)| m);
            let (q8_in, f16_in) = self.rows_for(n, qkv_mats, q8);
            self.mark("norms")?;
            self.norm_q8(n, x, delta, l.attn_norm, 0, (q8_in, f16_in), h)?;
            if let Some(prev) = pending_hidden.take() {
                self.copy_hidden(n, x, prev, hidden_layers, hidden)?;
            }
            // Each product reads f16 rows exactly where the kernel before it wrote them.
            self.mark(match l.gdn {
                Some(_) => "gdn in product",
                None => "qkv product",
            })?;
            self.matmul_stacked(
                &l.qkv,
                (q8, qblocks(h), f16_in != 0),
                (proj, l.width),
                n,
                Out::Set,
            )?;
            if l.gdn.is_some() {
                let (q8_in, f16_in) = self.rows_for(n, std::iter::once(&l.o), q8);
                self.mark("gdn conv")?;
                self.gdn_rows(n, li, proj, meta.parents, (q8_in, f16_in))?;
                let yq = qblocks(self.linear.as_ref().map_or(0, |(g, _)| g.v_heads * g.v_dim));
                self.mark("gdn out product")?;
                delta = self.residual(&l.o, (q8, yq, f16_in != 0), (x, proj), n)?;
                delta = self.mlp(l, n, (x, delta, proj, q8))?;
                if hidden_layers.contains(&li) {
                    pending_hidden = Some(li);
                }
                continue;
            }
            self.mark("qkv rope")?;
            let mut bld = Launch::new(&self.f.qkv_rope);
            let (qkv_w, nh_i, nkv_i, hd_i) = (l.width as i32, nh as i32, nkv as i32, hd as i32);
            let q_gated = l.q_gated as i32;
            bld.arg(&proj)
                .arg(&qkv_w)
                .arg(&l.qkv_bias)
                .arg(&l.q_norm)
                .arg(&l.k_norm)
                .arg(&self.cos)
                .arg(&self.sin)
                .arg(&pos)
                .arg(&slots)
                .arg(&q)
                .arg(&l.k_cache)
                .arg(&l.v_cache)
                .arg(&self.kv_stride)
                .arg(&n_i)
                .arg(&nh_i)
                .arg(&nkv_i)
                .arg(&hd_i)
                .arg(&self.eps)
                .arg(&self.interleaved)
                .arg(&l.k16)
                .arg(&l.v16)
                .arg(&q_gated)
                .arg(&self.rot);
            let cfg = LaunchConfig {
                grid_dim: (n as u32, (nh + 2 * nkv) as u32, 1),
                block_dim: ((hd / 2) as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: arguments in the kernel's order; proj holds n rows of qkv_width, the
            // caches hold every slot (the caller checked the context), q holds nh x n x hd.
            unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
            // Attention, its output quantised for the output projection by the combine
            // kernel (in a wide pass: f16 rows only).
            let kv = (l.k_cache, l.v_cache, l.k16, l.v16);
            let (q8_in, f16_in) = self.rows_for(n, std::iter::once(&l.o), q8);
            let att_out = if q8_in == 0 { 0 } else { att };
            let outs = (att_out, q8_in, f16_in);
            // A gated attention's combine multiplies each head by its gate (in proj, after
            // the head's query).
            let gate = match l.q_gated {
                true => (proj + 4 * hd as u64, l.width as i32),
                false => (0, 0),
            };
            self.mark("attention")?;
            self.attention(n, chunks, meta.width, q, kv, table, part, outs, gate)?;
            self.mark("o product")?;
            delta = self.residual(&l.o, (q8, qblocks(nh * hd), f16_in != 0), (x, proj), n)?;
            delta = self.mlp(l, n, (x, delta, proj, q8))?;
            if hidden_layers.contains(&li) {
                pending_hidden = Some(li);
            }
        }
        Ok((pending_hidden, delta))
    }

    /// A layer's MLP half after its mixer (whose output `delta` the norm adds to `x` first):
    /// returns what the next norm adds.
    fn mlp(&self, l: &Layer, n: usize, (x, delta, proj, q8): (u64, u64, u64, u64)) -> Result<u64> {
        let ffn = self.ffn;
        let h = self.h;
        // x += the mixer's output; norm; quantise.
        let (q8_in, f16_in) = self.rows_for(n, l.gate_up.iter().map(|(m, _)| m), q8);
        self.mark("norms")?;
        self.norm_q8(n, x, delta, l.ffn_norm, 0, (q8_in, f16_in), h)?;
        self.mark("gate, up product")?;
        // Through cuBLAS, gate and up come back as f16 rows (half the bytes to read).
        let gu = self.matmul_stacked(
            &l.gate_up,
            (q8, qblocks(h), f16_in != 0),
            (proj, 2 * ffn),
            n,
            Out::Half,
        )?;
        let gu16 = if gu == Out::Half { proj } else { 0 };
        let (q8_in, f16_in) = self.rows_for(n, std::iter::once(&l.down), q8);
        let qb = qblocks(ffn);
        self.mark("swiglu")?;
        let mut bld = Launch::new(&self.f.silu_mul_q8);
        let (stride, ffn_i, qb_i) = ((2 * ffn) as i32, ffn as i32, qb as i32);
        let group = self.act_group();
        bld.arg(&proj)
            .arg(&stride)
            .arg(&ffn_i)
            .arg(&q8_in)
            .arg(&qb_i)
            .arg(&f16_in)
            .arg(&gu16)
            .arg(&group);
        let cfg = LaunchConfig {
            // 8 warps of SILU_BLOCKS (8) Q8_1 blocks each (`kernels/rows.cu`).
            grid_dim: (n as u32, qb.div_ceil(8 * 8) as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: proj holds n rows of 2 x ffn (floats, or halves from the wide
        // product), q8 n rows of qb blocks.
        unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
        self.mark("down product")?;
        self.residual(&l.down, (q8, qb, f16_in != 0), (x, proj), n)
    }

    /// The rows a kernel (a norm, the attention combine, SwiGLU) writes for the product over
    /// `mats` after it, in a pass of `n` rows: `(q8, 0)`, Q8_1 rows; or where that product
    /// goes wide `(0, f16)`, f16 rows only, which it reads instead of converting Q8_1 ones.
    pub(super) fn rows_for<'a>(
        &self,
        n: usize,
        mats: impl Iterator<Item = &'a Mat>,
        q8: u64,
    ) -> (u64, u64) {
        let half = self.bufs.as_ref().and_then(|b| b.half.as_ref());
        match half {
            Some(half) if self.goes_wide(n, mats) => (0, half.device_ptr(&self.stream).0),
            _ => (q8, 0),
        }
    }

    /// The residual branch's product `W . y` for the `n` rows at `y`: added to `x` by the
    /// GEMM itself where it goes wide (returns 0: nothing left to add), else written to
    /// `proj` for the next norm to add (returns `proj`).
    pub(super) fn residual(
        &self,
        w: &Mat,
        y: (u64, usize, bool),
        (x, proj): (u64, u64),
        n: usize,
    ) -> Result<u64> {
        if self.wide_product(&[w], y, (x, self.h), n, Out::Add)? {
            return Ok(0);
        }
        self.matmul(&[w], y, (proj, self.h), n)?;
        Ok(proj)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn norm_q8(
        &self,
        n: usize,
        x: u64,
        delta: u64,
        w: u64,
        slots: u64,
        (q8, f16): (u64, u64),
        h: usize,
    ) -> Result<()> {
        let qb = qblocks(h);
        self.norm_q8_blocks(n, x, delta, w, slots, (q8, qb, qb), h, f16)
    }

    /// [`Self::norm_q8`] into `qb` Q8_1 blocks of rows `stride` blocks apart (part of a
    /// wider row: an MTP head's concatenated input).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn norm_q8_blocks(
        &self,
        n: usize,
        x: u64,
        delta: u64,
        w: u64,
        slots: u64,
        (q8, qb, stride): (u64, usize, usize),
        h: usize,
        f16: u64,
    ) -> Result<()> {
        let mut b = Launch::new(&self.f.norm_q8);
        let (h_i, qb_i, stride_i) = (h as i32, qb as i32, stride as i32);
        let group = self.act_group();
        b.arg(&x)
            .arg(&delta)
            .arg(&w)
            .arg(&slots)
            .arg(&q8)
            .arg(&h_i)
            .arg(&qb_i)
            .arg(&stride_i)
            .arg(&self.eps)
            .arg(&f16)
            .arg(&group);
        let cfg = LaunchConfig {
            grid_dim: (n as u32, 1, 1),
            block_dim: (NORM_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: x and delta hold n rows of h; q8 holds n rows (or slots) `stride` blocks
        // apart, of which the kernel writes the first `qb`; slots (when set) below n.
        unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        n: usize,
        chunks: usize,
        width: usize,
        q: u64,
        (k, v, k16, v16): (u64, u64, u64, u64),
        table: u64,
        part: u64,
        (out, q8, f16): (u64, u64, u64),
        (gate, gate_stride): (u64, i32),
    ) -> Result<()> {
        let (n_i, nh_i, nkv_i, hd_i) = (n as i32, self.nh as i32, self.nkv as i32, self.hd as i32);
        let (width_i, chunks_i) = (width as i32, chunks as i32);
        let qb_i = qblocks(self.nh * self.hd) as i32;
        let scale = 1.0f32 / (self.hd as f32).sqrt();
        let wide = (self.wide_now && self.wide_attention())
            .then_some(self.f.att_wide.as_ref())
            .flatten();
        // Wide: one partial a span of chunks (`attention::wide_span`); else one a chunk.
        let (span, slots) = match wide {
            Some(_) => crate::gpu::attention::wide_span(n, self.nh, self.nkv, chunks),
            None => (1, chunks),
        };
        let (span_i, slots_i) = (span as i32, slots as i32);
        let csz_i = crate::gpu::attention::chunk_arg(
            wide.is_some(),
            crate::gpu::attention::fixed_chunk_ranks(),
        );
        if let Some(f) = wide {
            let mut b = Launch::new(f);
            b.arg(&q)
                .arg(&k16)
                .arg(&v16)
                .arg(&table)
                .arg(&part)
                .arg(&n_i)
                .arg(&nh_i)
                .arg(&nkv_i)
                .arg(&self.kv_stride)
                .arg(&width_i)
                .arg(&chunks_i)
                .arg(&span_i)
                .arg(&slots_i)
                .arg(&scale);
            let cfg = crate::gpu::attention::wide_launch(n, (self.nh, self.nkv, self.hd), slots);
            // SAFETY: hd is the kernel's; the shadows are laid out as the caches; the chunks
            // cover the highest cache row any row sees (`attention::wide_chunks`); part as
            // below.
            unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
        } else {
            let mut b = Launch::new(&self.f.att_chunk);
            b.arg(&q)
                .arg(&k)
                .arg(&v)
                .arg(&table)
                .arg(&part)
                .arg(&n_i)
                .arg(&nh_i)
                .arg(&nkv_i)
                .arg(&hd_i)
                .arg(&self.kv_stride)
                .arg(&width_i)
                .arg(&chunks_i)
                .arg(&csz_i)
                .arg(&scale);
            let shape = (self.nh, self.nkv, self.hd);
            let cfg = crate::gpu::attention::chunk_launch(n, shape, chunks);
            // SAFETY: as in gpu::attention; the chunk count covers every row's key list.
            unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
        }
        let all_i = wide.is_some() as i32;
        // With a scale a super-block, a block takes the heads of one (`family_fits`).
        let group = if q8 != 0 { self.act_group() } else { 32 };
        let heads = (group as usize).div_ceil(self.hd);
        let mut b = Launch::new(&self.f.att_combine);
        b.arg(&part)
            .arg(&table)
            .arg(&out)
            .arg(&n_i)
            .arg(&nh_i)
            .arg(&hd_i)
            .arg(&width_i)
            .arg(&slots_i)
            .arg(&csz_i)
            .arg(&q8)
            .arg(&qb_i)
            .arg(&all_i)
            .arg(&f16)
            .arg(&group)
            .arg(&gate)
            .arg(&gate_stride);
        let cfg = LaunchConfig {
            grid_dim: ((self.nh / heads) as u32, n as u32, 1),
            block_dim: ((self.hd * heads) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: as above.
        unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
        Ok(())
    }
}
