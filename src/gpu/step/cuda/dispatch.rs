//! Which kernel a product runs on (dp4a, tensor cores, the K-quant family, cuBLAS for wide
//! passes) and its launch.

use super::*;

impl GpuStep {
    /// `dst[c * dst_stride + r] = W[r] . y[c]` for the `n` activation rows `y` (Q8_1, `yq`
    /// blocks a row), `W` the stack of `mats` (one to three matrices that [`Self::stacks`]
    /// allows together): one launch, on tensor cores ([`launch_mmtc`], [`launch_mmq`]) or dp4a, the rows in
    /// chunks of four beyond the first.
    pub(super) fn matmul(
        &self,
        mats: &[&Mat],
        (y, yq, ready): (u64, usize, bool),
        dst: (u64, usize),
        n: usize,
    ) -> Result<()> {
        let Some(first) = mats.first() else {
            return Ok(());
        };
        if self.wide_product(mats, (y, yq, ready), dst, n, Out::Set)? {
            return Ok(());
        }
        let stack = Stack::of(mats)?;
        // Chosen for the stack's rows (every kernel of a family sums a row alike).
        match self.tensor_core_kernel(first, n, stack.rows) {
            Some(TcKernel::Mmtc(kernel)) => {
                let f = &self.f.mmtc[&(first.tag, kernel)];
                launch_mmtc(self.on(), f, &stack, kernel, (y, yq), dst, n)
            }
            Some(TcKernel::Mmq(kernel)) => {
                let f = &self.f.mmq[&(first.tag, kernel)];
                let b = self.bufs.as_ref().expect("ensured");
                let scratch = b.mmq.as_ref().expect("allocated with the family on");
                launch_mmq(
                    self.on(),
                    (f, first.tag),
                    &stack,
                    kernel,
                    (y, yq),
                    dst,
                    n,
                    scratch,
                )
            }
            None => {
                let kernel = Dp4a::for_pass(first.tag, stack.rows, stack.cols, n);
                let funcs = match stack.is_one() {
                    true => &self.f.mmvq,
                    false => &self.f.mmvq_stacked,
                };
                launch_mmvq(
                    self.on(),
                    &funcs[&(first.tag, kernel)],
                    kernel,
                    &stack,
                    (y, yq),
                    dst,
                    n,
                )
            }
        }
    }

    /// [`Self::matmul`] through the wide products (cuBLAS) where the pass goes wide for
    /// `mats`, written as `out` says: `Ok(false)` (nothing done) where it does not.
    pub(super) fn wide_product(
        &self,
        mats: &[&Mat],
        (y, yq, ready): (u64, usize, bool),
        dst: (u64, usize),
        n: usize,
        out: Out,
    ) -> Result<bool> {
        let half = self.bufs.as_ref().and_then(|b| b.half.as_ref());
        let (true, Some(wide), Some(half)) =
            (self.goes_wide(n, mats.iter().copied()), &self.wide, half)
        else {
            return Ok(false);
        };
        let stack: Vec<_> = mats.iter().map(|m| (m.ptr, m.rows, m.cols)).collect();
        let half = half.device_ptr(&self.stream).0;
        wide.product(&self.stream, &stack, (y, yq), (half, ready), dst, n, out)?;
        Ok(true)
    }

    /// [`Self::matmul`] of matrices that share their input (q, k and v; gate and up), each
    /// `(weight, first output column)`: runs of up to three that one launch takes
    /// ([`Self::stacks`]) go to one launch of the tensor-core kernel or of
    /// `mmvq_<tag>_<kernel>_stacked` (one launch instead of three; each row computed exactly as
    /// alone), the rest one launch each. Through the wide products, written as `out` says;
    /// returns how the results were written (f32 everywhere else).
    pub(super) fn matmul_stacked(
        &self,
        ws: &[(Mat, usize)],
        (y, yq, ready): (u64, usize, bool),
        (dst, dst_stride): (u64, usize),
        n: usize,
        out: Out,
    ) -> Result<Out> {
        // Through the wide products all of them go in one call (one conversion of the
        // input, one GEMM for the copies that lie back to back).
        let back_to_back = ws.windows(2).all(|w| w[1].1 == w[0].1 + w[0].0.rows);
        if let (true, Some((_, first))) = (back_to_back, ws.first()) {
            let mats: Vec<&Mat> = ws.iter().map(|(m, _)| m).collect();
            let at = dst + (first * out.bytes()) as u64;
            if self.wide_product(&mats, (y, yq, ready), (at, dst_stride), n, out)? {
                return Ok(out);
            }
        }
        let mut i = 0;
        while i < ws.len() {
            let mut j = i + 1;
            while j < ws.len() && j - i < 3 && self.stacks(&ws[j - 1], &ws[j], n) {
                j += 1;
            }
            let at = dst + (ws[i].1 * 4) as u64;
            let mats: Vec<&Mat> = ws[i..j].iter().map(|(m, _)| m).collect();
            self.matmul(&mats, (y, yq, ready), (at, dst_stride), n)?;
            i = j;
        }
        Ok(Out::Set)
    }

    /// Whether `b` can follow `a` in one stacked launch: one format, row length and kernel
    /// (tensor cores, whose rows come in sixteens, or dp4a, with an even row count each: the
    /// chunked kernel takes rows in pairs), and `b`'s output columns right after `a`'s.
    pub(super) fn stacks(
        &self,
        (a, a_off): &(Mat, usize),
        (b, b_off): &(Mat, usize),
        n: usize,
    ) -> bool {
        let tc = self.tensor_core_kernel(a, n, a.rows).is_some();
        let same = a.tag == b.tag
            && a.cols == b.cols
            && tc == self.tensor_core_kernel(b, n, b.rows).is_some();
        let even = a.rows.is_multiple_of(2) && b.rows.is_multiple_of(2);
        same && (tc || even) && *b_off == a_off + a.rows
    }

    /// The tensor-core product's kernel for `n` activation rows of `w` in a stack of `rows`
    /// rows ([`mmtc_kernel`], or [`mmq_kernel`] in the K-quant family), or `None` where `w`
    /// goes through the dp4a product: tensor cores off, a format without a tensor-core
    /// kernel, rows not a multiple of 16 or a row length not a multiple of 256.
    pub(super) fn tensor_core_kernel(&self, w: &Mat, n: usize, rows: usize) -> Option<TcKernel> {
        if !(self.tensor_cores && self.has_tensor_core_kernel(w)) {
            return None;
        }
        Some(match self.mmq {
            true => TcKernel::Mmq(mmq_kernel(n, rows, w.cols)),
            false => TcKernel::Mmtc(mmtc_kernel(n, rows, w.cols)),
        })
    }

    /// Whether `w` has a tensor-core product: its format one with a kernel (loaded), rows a
    /// multiple of 16, a row length a multiple of 256.
    pub(super) fn has_tensor_core_kernel(&self, w: &Mat) -> bool {
        let shape_fits = w.rows.is_multiple_of(16) && w.cols.is_multiple_of(256);
        let loaded = match self.mmq {
            true => self.f.mmq.contains_key(&(w.tag, Mmq::Rows(1))),
            false => self.f.mmtc.contains_key(&(w.tag, Mmtc::ROW)),
        };
        shape_fits && loaded
    }
}
