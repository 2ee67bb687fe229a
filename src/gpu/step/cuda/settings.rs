//! The step's switches and what they imply: graphs, tensor cores, wide passes, PDL, the stream
//! passes replay on.

use super::*;

impl GpuStep {
    /// Whether the step's kernels launch with PDL (`gpu::launch`: sm_90 or later, a build
    /// for it, `TREESPEC_PDL` not `0`): its row, attention and tensor-core kernels, and the
    /// dp4a products whose kernel waits ([`Dp4a::dependent`]).
    pub fn dependent_launches(&self) -> bool {
        self.pdl
    }

    /// What the step's products run on, for its settings line: dp4a, the tensor-core tiles, or
    /// the K-quant family of one summation order for every row count ([`crate::gpu::mmq`];
    /// chosen by [`super::mmq_wanted`]).
    pub fn products_name(&self) -> &'static str {
        match (self.tensor_cores, self.mmq) {
            (true, true) => "K-quant family products (one summation order for any rows)",
            (true, false) => "tensor-core products",
            (false, _) => "dp4a products",
        }
    }

    /// The products are the K-quant family's.
    pub fn family(&self) -> bool {
        self.tensor_cores && self.mmq
    }

    /// The row count from which passes multiply through cuBLAS with f16 copies of the
    /// weights ([`crate::gpu::wide`]), the bytes the copies take, and whether verify passes
    /// do too; `None` where they are off or did not fit.
    pub fn wide_products(&self) -> Option<WideInfo> {
        self.wide.as_ref().map(|w| WideInfo {
            from: w.from,
            bytes: w.bytes(),
            verify: self.wide_verify,
            source: self.wide_source,
        })
    }

    /// Send passes of `from` rows and more through the wide products (a calibration's
    /// measurements: `bench --costs --calibrate`); false where the step has none. Captured
    /// graphs are dropped.
    pub fn set_wide_from(&mut self, from: usize) -> bool {
        match self.wide.as_mut() {
            Some(w) => {
                w.from = from;
                self.graphs.clear();
                true
            }
            None => false,
        }
    }

    /// Let verify passes (those reading more than one row's logits) of many rows through
    /// the cuBLAS products too (`on`), or only passes that read at most one row's logits
    /// (a prompt's, the default: verify passes stay batch-invariant, bit-exact to `ar`).
    /// Captured graphs are dropped.
    pub fn set_wide_verify(&mut self, on: bool) {
        if on != self.wide_verify {
            self.wide_verify = on;
            self.graphs.clear();
        }
    }

    /// Cache rows were written outside the step (candle's ops): until the cache is emptied
    /// ([`Self::shadow_fresh`]), wide passes attend the f32 caches, as the shadows may be
    /// behind. Captured graphs are dropped.
    pub fn mark_shadow_stale(&mut self) {
        if !self.shadow_stale && !self.shadow.is_empty() {
            self.shadow_stale = true;
            self.graphs.clear();
        }
    }

    /// The cache was emptied: the shadows hold every row written from now on.
    pub fn shadow_fresh(&mut self) {
        if self.shadow_stale {
            self.shadow_stale = false;
            self.graphs.clear();
        }
    }

    /// Whether the pass being launched (of `n` rows) multiplies `mats` through the wide
    /// products: it goes wide ([`Self::wide_pass`]) and they have copies.
    pub(super) fn goes_wide<'a>(&self, n: usize, mats: impl Iterator<Item = &'a Mat>) -> bool {
        self.wide_now
            && self
                .wide
                .as_ref()
                .is_some_and(|w| w.takes(n, mats.map(|m| m.ptr)))
    }

    /// Whether a wide pass's attention runs on tensor cores (`attention_wide_mma`, over the
    /// caches' f16 shadows): the kernel loaded and the shadows there and current.
    pub(super) fn wide_attention(&self) -> bool {
        self.f.att_wide.is_some() && !self.shadow.is_empty() && !self.shadow_stale
    }

    /// Whether a pass of `n` rows reading `m` rows' logits multiplies through the wide
    /// products ([`crate::gpu::wide::takes_pass`]).
    pub(super) fn wide_pass(&self, n: usize, m: usize) -> bool {
        self.wide
            .as_ref()
            .is_some_and(|w| crate::gpu::wide::takes_pass(w.from, self.wide_verify, n, m))
    }

    /// Where this step's launches go.
    pub(super) fn on(&self) -> LaunchOn<'_> {
        LaunchOn {
            stream: &self.stream,
            pdl: self.pdl,
        }
    }

    /// Turn graph capture on (unless `TREESPEC_CUDA_GRAPHS=0` or a capture failed) or off
    /// (every pass eagerly); captured graphs are dropped.
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs_on = on && graphs_allowed() && !self.graphs_failed;
        self.graphs.clear();
        self.seen.clear();
    }

    /// Whether passes replay from CUDA graphs.
    pub fn graphs_on(&self) -> bool {
        self.graphs_on
    }

    /// Whether passes that copy hidden states out replay from CUDA graphs too (off when
    /// graphs are, or after such a pass failed to capture).
    pub fn hidden_graphs_on(&self) -> bool {
        self.graphs_on && !self.hidden_graphs_failed
    }

    /// Run Q4_K / Q6_K products on tensor cores (`kernels/mmtc.cu` or the K-quant family,
    /// see [`super::tensor_cores_for`]) or on the dp4a kernel; captured graphs and the
    /// buffers are dropped (the quantisers' scale groups and the family's workspace change).
    /// Returns whether any now runs on tensor cores (none on a GPU older than sm_80, none
    /// where no weight has a format and shape the kernels take).
    pub fn set_tensor_cores(&mut self, on: bool) -> bool {
        let mut mats = weights(&self.layers, &self.lm_head);
        let on = on && mats.any(|w| self.has_tensor_core_kernel(w));
        if on != self.tensor_cores {
            // Graphs hold the kernels they were captured with; the shapes seen stay seen.
            self.tensor_cores = on;
            self.graphs.clear();
            self.bufs = None;
        }
        on
    }

    /// Values of a quantised activation row that share a scale: a super-block where the
    /// K-quant family takes the products (its contract), else a Q8_1 block.
    pub(super) fn act_group(&self) -> i32 {
        if self.tensor_cores && self.mmq {
            ACT_GROUP as i32
        } else {
            32
        }
    }

    /// Replay captured passes on a stream of the GPU's highest priority: where another
    /// model's work runs beside this one (a drafter drafting while the target verifies),
    /// the GPU schedules this one's blocks first. (Eager passes stay on candle's stream.)
    pub fn set_high_priority(&mut self) -> Result<()> {
        if self.replay_on.is_some() {
            return Ok(());
        }
        let ctx = self.stream.context();
        let (_, greatest) = result::stream::get_priority_range().map_err(driver)?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
        self.replay_on = Some(ReplayStream {
            stream: ctx.new_stream_with_priority(greatest).map_err(driver)?,
            ready: ctx.new_event(flags).map_err(driver)?,
            done: ctx.new_event(flags).map_err(driver)?,
        });
        Ok(())
    }

    /// Passes so far that did not replay a captured graph because their shape was new: run
    /// eagerly on its first sight, captured on its second. Such a pass costs several
    /// replayed ones, so a step that ran one says little about what the step costs from
    /// then on (`auto` leaves it out of its estimates).
    pub fn cold_passes(&self) -> u64 {
        self.cold
    }
}
