//! A key/value cache allocated once for the whole context, with the two edits speculative decoding
//! needs: `truncate` (drop rejected rows) and `keep` (gather the accepted rows of a tree block so
//! they sit right after the prefix).

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// One layer's K and V, each `[kv_heads, capacity, head_dim]`, of which the first `len` rows along
/// the middle axis are valid.
#[derive(Debug, Clone)]
pub struct KvCache {
    k: Tensor,
    v: Tensor,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// Allocate a cache for `capacity` positions.
    pub fn new(
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let k = Tensor::zeros((kv_heads, capacity, head_dim), dtype, device)?;
        let v = Tensor::zeros((kv_heads, capacity, head_dim), dtype, device)?;
        Ok(KvCache {
            k,
            v,
            len: 0,
            capacity,
        })
    }

    /// Valid rows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no row is valid.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Write `k` and `v` (`[kv_heads, n, head_dim]`) after the valid rows.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let n = k.dim(1)?;
        if self.len + n > self.capacity {
            return Err(Error::ContextOverflow {
                prompt: self.len + n,
                context: self.capacity,
            });
        }
        self.k.slice_set(&k.contiguous()?, 1, self.len)?;
        self.v.slice_set(&v.contiguous()?, 1, self.len)?;
        self.len += n;
        Ok(())
    }

    /// The whole K and V tensors `[kv_heads, capacity, head_dim]`, for a kernel that writes rows
    /// in place (the GPU decoder step), followed by [`KvCache::advance`].
    pub(crate) fn storage(&self) -> (&Tensor, &Tensor) {
        (&self.k, &self.v)
    }

    /// Count `n` rows written in place after the valid ones as valid.
    pub(crate) fn advance(&mut self, n: usize) -> Result<()> {
        if self.len + n > self.capacity {
            return Err(Error::ContextOverflow {
                prompt: self.len + n,
                context: self.capacity,
            });
        }
        self.len += n;
        Ok(())
    }

    /// Views of the valid rows: `([kv_heads, len, head_dim], [kv_heads, len, head_dim])`.
    pub fn view(&self) -> Result<(Tensor, Tensor)> {
        Ok((
            self.k.narrow(1, 0, self.len)?,
            self.v.narrow(1, 0, self.len)?,
        ))
    }

    /// Forget every row from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Keep, of the rows from `base` on, only those at offsets `rows` (ascending offsets relative to
    /// `base`), moved so they sit at `base, base+1, ...`; everything after them is dropped.
    pub fn keep(&mut self, base: usize, rows: &[usize]) -> Result<()> {
        let idx = Self::keep_index(base, rows, self.k.device())?;
        self.keep_indexed(base, rows, idx.as_ref())
    }

    /// Whether a keep of the offsets `rows` moves nothing (they are 0, 1, 2, ...).
    pub fn in_place(rows: &[usize]) -> bool {
        rows.iter().enumerate().all(|(i, &r)| i == r)
    }

    /// The cache positions [`Self::keep`] gathers (`base + r` for each offset `r`), as a tensor
    /// on `device`; `None` where the rows kept are already in place (`rows` is 0, 1, 2, ...).
    /// Built once, it serves every layer's cache ([`Self::keep_indexed`]).
    pub fn keep_index(base: usize, rows: &[usize], device: &Device) -> Result<Option<Tensor>> {
        if Self::in_place(rows) {
            return Ok(None);
        }
        let position = |r: usize| {
            let p = base.checked_add(r).and_then(|p| u32::try_from(p).ok());
            p.ok_or_else(|| Error::InvalidArgument(format!("keep: row {r} is past any cache")))
        };
        let idx = rows
            .iter()
            .map(|&r| position(r))
            .collect::<Result<Vec<u32>>>()?;
        Ok(Some(Tensor::from_vec(idx, rows.len(), device)?))
    }

    /// Whether [`Self::keep`] of `rows` from `base` can run: `base` within the valid rows, every
    /// row inside the block after it.
    pub fn check_keep(&self, base: usize, rows: &[usize]) -> Result<()> {
        if base > self.len {
            return Err(Error::InvalidArgument(format!(
                "keep: base {base} is past the {} valid rows",
                self.len
            )));
        }
        let block = self.len - base;
        if let Some(&bad) = rows.iter().find(|&&r| r >= block) {
            return Err(Error::InvalidArgument(format!(
                "keep: row {bad} is outside the block of {block} rows"
            )));
        }
        Ok(())
    }

    /// Count `count` rows after `base` as valid, after a keep done in place by another hand
    /// (the GPU step's one-launch compaction), checked first with [`Self::check_keep`].
    pub(crate) fn kept(&mut self, base: usize, count: usize) {
        self.len = base + count;
    }

    /// [`Self::keep`] with the gather index from [`Self::keep_index`] for the same `base` and
    /// `rows`.
    pub fn keep_indexed(
        &mut self,
        base: usize,
        rows: &[usize],
        idx: Option<&Tensor>,
    ) -> Result<()> {
        self.check_keep(base, rows)?;
        // A cache of no heads (a Gated DeltaNet layer's) holds only its count: nothing to move,
        // and an empty gather is an invalid launch on a GPU.
        if let Some(idx) = idx.filter(|_| self.k.elem_count() > 0) {
            let k = self.k.index_select(idx, 1)?;
            let v = self.v.index_select(idx, 1)?;
            self.k.slice_set(&k, 1, base)?;
            self.v.slice_set(&v, 1, base)?;
        }
        self.len = base + rows.len();
        Ok(())
    }
}
