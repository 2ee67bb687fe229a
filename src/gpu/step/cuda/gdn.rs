//! A hybrid model's Gated DeltaNet layers in the step (`kernels/gdn.cu`): the fold of the last
//! block's kept path into every layer's committed state at the start of a pass (`gdn_commit`,
//! in place, from the stash), and a layer's rows: the convolution over each row's path (stashing
//! what a later fold replays), the recurrence with its gated norm, the output quantised for the
//! out projection. A block longer than the stash is a chain folded whole as it runs (a prompt).

use super::*;

impl GpuStep {
    /// Write a pass's fold, parents and walk into its metadata (`meta`: the block from [`Meta::gdn`]).
    /// Returns whether the rows' walk saves and restores states (a tree, not a chain).
    pub(super) fn place_fold(&self, g: &GdnPass, n: usize, meta: &mut [u32]) -> Result<bool> {
        let fold = g.fold;
        if g.parents.len() != n {
            return Err(Error::InvalidArgument(format!(
                "GPU step: {} parents for a block of {n}",
                g.parents.len()
            )));
        }
        super::super::gdn_block_fits(g.parents)?;
        if !fold.foldable() {
            return Err(Error::InvalidArgument(
                "the Gated DeltaNet state cannot fold the last block (a tree with no path kept)"
                    .into(),
            ));
        }
        let stashed = self.stash.as_ref().map_or(0, |s| s.rows);
        if fold.path.iter().any(|&r| r >= stashed) || fold.path.len() > GDN_STASH_ROWS {
            return Err(Error::InvalidArgument(format!(
                "fold of rows {:?} past the {stashed} the step kept",
                fold.path
            )));
        }
        meta[0] = fold.path.len() as u32;
        meta[1] = fold.restart as u32;
        for (slot, &r) in meta[2..].iter_mut().zip(&fold.path) {
            *slot = r as u32;
        }
        for (slot, p) in meta[GDN_FOLD..GDN_FOLD + n].iter_mut().zip(g.parents) {
            *slot = p.map_or(u32::MAX, |p| p as u32);
        }
        if n > GDN_STASH_ROWS {
            return Ok(false);
        }
        let walk = crate::gpu::gdn_walk::schedule(g.parents)?;
        meta[GDN_FOLD + n..GDN_FOLD + 2 * n + 1].copy_from_slice(&walk);
        Ok(crate::gpu::gdn_walk::branches(&walk))
    }

    /// The stash, made on first need for blocks of up to [`GDN_STASH_ROWS`] rows (once: a
    /// stash grown later would lose the rows a fold is about to read), with the table
    /// `gdn_commit` reads.
    pub(super) fn ensure_stash(&mut self) -> Result<()> {
        if self.stash.is_some() {
            return Ok(());
        }
        let Some((l, _)) = &self.linear else {
            return Ok(());
        };
        let rows = GDN_STASH_ROWS;
        let (ch, hv) = (l.conv_channels(), l.v_heads);
        self.graphs.clear();
        self.stash = None;
        let s = &self.stream;
        let alloc = |len: usize| s.alloc_zeros::<f32>(len).map_err(driver);
        let mut bufs = vec![];
        let mut table = vec![];
        for gl in self.layers.iter().filter_map(|l| l.gdn.as_ref()) {
            let b = [alloc(rows * ch)?, alloc(rows * ch)?, alloc(rows * 2 * hv)?];
            table.extend([
                gl.s.device_ptr(s).0,
                gl.window.device_ptr(s).0,
                b[0].device_ptr(s).0,
                b[1].device_ptr(s).0,
                b[2].device_ptr(s).0,
                gl.a_neg,
                gl.dt_bias,
            ]);
            bufs.push(b);
        }
        let table = s.clone_htod(&table).map_err(driver)?;
        self.stash = Some(GdnStash { rows, bufs, table });
        Ok(())
    }

    /// Fold the pass's `fold` (at `fold_at` in the metadata) into every Gated DeltaNet layer's
    /// committed state: one launch, which does nothing where the fold is empty.
    pub(super) fn gdn_commit(&self, fold_at: u64) -> Result<()> {
        let (Some((l, _)), Some(f), Some(stash)) = (&self.linear, &self.f.gdn, &self.stash) else {
            return Ok(());
        };
        let layers = stash.bufs.len();
        let threads = gdn_threads(l);
        let ch = l.conv_channels();
        let table = stash.table.device_ptr(&self.stream).0;
        let mut b = Launch::new(&f.commit);
        let (ch_i, taps, kh, hv, kd, vd, tiled) = shape_args(l);
        b.arg(&table)
            .arg(&fold_at)
            .arg(&ch_i)
            .arg(&taps)
            .arg(&kh)
            .arg(&hv)
            .arg(&kd)
            .arg(&vd)
            .arg(&tiled);
        let cfg = LaunchConfig {
            grid_dim: (
                (l.v_heads + ch.div_ceil(threads as usize)) as u32,
                layers as u32,
                1,
            ),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the table holds every Gated DeltaNet layer's state, stash and gate weights
        // (7 addresses a layer, as `GdnLayer` in the kernel); the fold's rows lie in the stash
        // (`place_fold`); the shape is within the kernel's limits (`gpu::gdn::unsupported`).
        unsafe { b.launch(self.on(), cfg) }.map_err(driver)?;
        Ok(())
    }

    /// A Gated DeltaNet layer's rows, its projections `[c | z | b | a]` in `proj` (rows
    /// `l.width` apart), each row continuing its parent (`meta.parents`): the gated outputs
    /// quantised into `q8` (or as f16 rows where the out projection goes wide).
    pub(super) fn gdn_rows(
        &self,
        n: usize,
        li: usize,
        proj: u64,
        parents: u64,
        (q8, f16): (u64, u64),
    ) -> Result<()> {
        let (Some((sh, eps)), Some(f)) = (&self.linear, &self.f.gdn) else {
            return Err(Error::Device(
                "a Gated DeltaNet layer without its kernels".into(),
            ));
        };
        let l = &self.layers[li];
        let g = l.gdn.as_ref().expect("a Gated DeltaNet layer");
        let s = &self.stream;
        let b = self.bufs.as_ref().expect("ensured");
        let (ch, hv, vd) = (sh.conv_channels(), sh.v_heads, sh.v_dim);
        let whole = n > GDN_STASH_ROWS;
        // Where the convolution's outputs go: the stash, or (a long chain) the scratch rows.
        let slot = self.layers[..li].iter().filter(|l| l.gdn.is_some()).count();
        let (u, c_stash, ab_stash) = match (whole, &self.stash) {
            (false, Some(st)) => {
                let bb = &st.bufs[slot];
                (
                    bb[1].device_ptr(s).0,
                    bb[0].device_ptr(s).0,
                    bb[2].device_ptr(s).0,
                )
            }
            (true, _) => match &b.gdn_u {
                Some(u) => (u.device_ptr(s).0, 0, 0),
                None => {
                    return Err(Error::Device(
                        "no rows for a long Gated DeltaNet block".into(),
                    ))
                }
            },
            (false, None) => return Err(Error::Device("no Gated DeltaNet stash".into())),
        };
        let (window, state) = (g.window.device_ptr(s).0, g.s.device_ptr(s).0);
        let (ch_i, taps, kh, hv_i, kd, vd_i, tiled) = shape_args(sh);
        let (width, ab_at) = (l.width as i32, (hv * vd) as i32);
        let mut bld = Launch::new(&f.conv);
        bld.arg(&proj)
            .arg(&width)
            .arg(&window)
            .arg(&g.conv)
            .arg(&parents)
            .arg(&u)
            .arg(&ch_i)
            .arg(&taps)
            .arg(&kh)
            .arg(&kd)
            .arg(&c_stash)
            .arg(&ab_stash)
            .arg(&ab_at)
            .arg(&hv_i);
        let cfg = LaunchConfig {
            grid_dim: crate::gpu::gdn::conv_grid(n, sh),
            block_dim: (crate::gpu::gdn::CONV_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: proj holds n rows of `width` ([c | z | b | a]); the window, taps and stash
        // as the layer's shape; parents each below its row or u32::MAX.
        unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
        self.mark("gdn recurrence")?;
        // The recurrence: each row once, in the order of the pass's walk (after the parents in
        // the metadata); a long chain (folded as it runs) in order, which leaves the state after
        // the last row in place.
        let att = b.att.device_ptr(s).0;
        let fw = 4 * ch as u64;
        let (zp, bp) = (proj + fw, proj + fw + 4 * (hv * vd) as u64);
        let ap = bp + 4 * hv as u64;
        let s_out = if whole { state } else { 0 };
        let state_row = if whole { n as i32 - 1 } else { -1 };
        let walk = if whole { 0 } else { parents + 4 * n as u64 };
        // Shared memory for saved states only where the walk saves any (a tree: the graph key
        // says so), so a chain's blocks stay small enough to share a multiprocessor.
        let branching = !whole && self.branching_now;
        let launch = crate::gpu::gdn::tree_launch(n, !whole, branching, (sh.k_dim, vd))?;
        let tree = f.tree(launch.kernel)?;
        let zf = if launch.fused { zp } else { 0 };
        let (n_i, slots) = (n as i32, launch.slots as i32);
        let mut bld = Launch::new(tree);
        bld.arg(&u)
            .arg(&ap)
            .arg(&bp)
            .arg(&zf)
            .arg(&g.a_neg)
            .arg(&g.dt_bias)
            .arg(&g.norm)
            .arg(&state)
            .arg(&walk)
            .arg(&att)
            .arg(&s_out)
            .arg(&n_i)
            .arg(&slots)
            .arg(&state_row)
            .arg(&kh)
            .arg(&hv_i)
            .arg(&kd)
            .arg(&vd_i)
            .arg(&tiled)
            .arg(eps)
            .arg(&width)
            .arg(&width);
        let cfg = LaunchConfig {
            grid_dim: (hv as u32, vd.div_ceil(launch.cols) as u32, 1),
            block_dim: (launch.threads, 1, 1),
            shared_mem_bytes: launch.shared,
        };
        // SAFETY: u holds n rows of C; a, b, z the proj rows' columns (rows `width` apart); the
        // state [hv, dk, dv]; att n rows of hv * dv; the walk n + 1 entries (place_fold), each
        // row after its parent, its slots and schedule in `launch.shared`; only a chain writes
        // the state (each block its own columns, read before written).
        unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
        if !launch.fused {
            self.gdn_norm(n, att, zp, &g.norm, (&f.norm, sh, *eps), width)?;
        }
        if whole {
            let last = n as i32 - 1;
            let mut bld = Launch::new(&f.window);
            bld.arg(&proj)
                .arg(&width)
                .arg(&window)
                .arg(&parents)
                .arg(&window)
                .arg(&last)
                .arg(&ch_i)
                .arg(&taps);
            let cfg = LaunchConfig {
                grid_dim: ((ch as u32).div_ceil(THREADS), 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: as the convolution; the window is rewritten in place, each thread its own
            // channel, every slot read before it is written (the kernel's comment).
            unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
        }
        // The gated outputs to Q8_1 (or f16) for the out projection.
        self.gdn_quant(n, att, hv * vd, (q8, f16))
    }

    /// `gdn_norm` over a layer's `n` rows of raw outputs at `att` (in place), the gate `z` in the
    /// projection rows (`width` apart), the norm's weight at `norm`.
    fn gdn_norm(
        &self,
        n: usize,
        att: u64,
        z: u64,
        norm: &u64,
        (f, sh, eps): (&CudaFunction, &crate::arch::config::LinearAttention, f32),
        width: i32,
    ) -> Result<()> {
        let (hv, vd) = (sh.v_heads as i32, sh.v_dim as i32);
        let mut bld = Launch::new(f);
        bld.arg(&att)
            .arg(&z)
            .arg(norm)
            .arg(&hv)
            .arg(&vd)
            .arg(&eps)
            .arg(&width);
        let cfg = LaunchConfig {
            grid_dim: (n as u32, sh.v_heads as u32, 1),
            block_dim: (gdn_threads(sh), 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: att holds n rows of hv * dv raw outputs, normed in place; z the proj rows'
        // columns; the norm's weight dv.
        unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
        Ok(())
    }

    /// The `n` rows of `width` gated outputs at `att` quantised for the out projection: to
    /// Q8_1 rows at `q8`, or f16 rows at `f16` where the product goes wide.
    fn gdn_quant(&self, n: usize, att: u64, width: usize, (q8, f16): (u64, u64)) -> Result<()> {
        let width_o = width as i32;
        let qb = qblocks(width) as i32;
        let group = if q8 != 0 { self.act_group() } else { 32 };
        let mut bld = Launch::new(&self.f.quant_rows);
        bld.arg(&att)
            .arg(&width_o)
            .arg(&width_o)
            .arg(&q8)
            .arg(&qb)
            .arg(&f16)
            .arg(&group);
        // A warp a Q8_1 block, or a super-block where they share a scale.
        let units = if group == 256 { qb / 8 } else { qb };
        let cfg = LaunchConfig {
            grid_dim: (n as u32, (units as u32).div_ceil(THREADS / 32), 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: att holds n rows of `width`; q8 n rows of qb blocks; f16 (when set) n rows.
        unsafe { bld.launch(self.on(), cfg) }.map_err(driver)?;
        Ok(())
    }
}

/// Threads of the norm and fold kernels (`gdn_norm`, `gdn_commit`): a block the whole head.
fn gdn_threads(l: &crate::arch::config::LinearAttention) -> u32 {
    crate::gpu::gdn::lane_threads(l.v_dim)
}

/// The shape arguments the kernels take: (C, taps, key heads, value heads, dk, dv, tiled).
fn shape_args(l: &crate::arch::config::LinearAttention) -> (i32, i32, i32, i32, i32, i32, i32) {
    (
        l.conv_channels() as i32,
        l.conv as i32,
        l.k_heads as i32,
        l.v_heads as i32,
        l.k_dim as i32,
        l.v_dim as i32,
        l.v_tiled as i32,
    )
}
