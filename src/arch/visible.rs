//! Which cached keys each new row of a forward pass attends to, held as a list per row: a leading
//! run of cache rows `0..lead` and then extra rows in ascending order. The key of rank `r` is `r`
//! for `r < lead`, else `extra[r - lead]`. Two rows that see the same keys in the same rank order
//! get the same attention output from the GPU kernel (`gpu::attention`), wherever those keys sit
//! in the cache: that is what makes a draft tree's verify pass agree bit for bit with plain
//! decoding; the host computes it as the kernel does (`gpu::attention`, a row and head a thread).
//! Head shapes the kernel does not take run the same visibility as a dense additive mask
//! ([`VisibleKeys::dense_mask`]) through candle's ops.

use crate::arch::batch::{BlockMask, PastMask, MASKED};
use crate::error::Result;
use candle_core::{Device, Tensor};

/// Per new row of a block: the cache rows it sees, as `0..lead` plus `extra`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibleKeys {
    rows: Vec<(usize, Vec<usize>)>,
    total: usize,
}

impl VisibleKeys {
    /// The visibility of `n` new rows appended after `prefix` cached rows: every row sees the
    /// cached rows (those from `past.start` on only where listed) and the block rows `mask`
    /// allows (causal when `None`).
    pub fn new(mask: Option<&BlockMask>, past: Option<&PastMask>, n: usize, prefix: usize) -> Self {
        let rows = (0..n)
            .map(|i| {
                let mut seen: Vec<usize> = match past {
                    Some(p) => {
                        let mut v: Vec<usize> = (0..p.start.min(prefix)).collect();
                        let mut listed = p.visible[i].clone();
                        listed.sort_unstable();
                        listed.dedup();
                        v.extend(listed);
                        v
                    }
                    None => (0..prefix).collect(),
                };
                seen.extend(
                    (0..n)
                        .filter(|&j| match mask {
                            Some(bm) => bm.allows(i, j),
                            None => j <= i,
                        })
                        .map(|j| prefix + j),
                );
                let lead = seen
                    .iter()
                    .enumerate()
                    .take_while(|(r, &k)| *r == k)
                    .count();
                (lead, seen.split_off(lead))
            })
            .collect();
        VisibleKeys {
            rows,
            total: prefix + n,
        }
    }

    /// One new row after `prefix` cached rows that sees them all and itself (what
    /// [`VisibleKeys::new`] gives for `n` = 1 without a mask, without listing the prefix).
    pub fn one_causal(prefix: usize) -> Self {
        Self::causal(1, prefix)
    }

    /// `n` new rows after `prefix` cached rows, each seeing the cache and the block's rows up to
    /// itself: [`VisibleKeys::new`] without a mask, without listing the prefix.
    pub fn causal(n: usize, prefix: usize) -> Self {
        VisibleKeys {
            rows: (0..n).map(|i| (prefix + i + 1, vec![])).collect(),
            total: prefix + n,
        }
    }

    /// Rows of the block.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True for an empty block.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// True when every row sees every cached row (nothing to mask).
    pub fn sees_all(&self) -> bool {
        self.rows
            .iter()
            .all(|(lead, extra)| *lead == self.total && extra.is_empty())
    }

    /// The keys row `i` sees, in rank order.
    pub fn keys(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let (lead, extra) = &self.rows[i];
        (0..*lead).chain(extra.iter().copied())
    }

    /// How many keys row `i` sees.
    pub fn count(&self, i: usize) -> usize {
        let (lead, extra) = &self.rows[i];
        lead + extra.len()
    }

    /// The highest cache row row `i` sees (extras ascend and follow the lead).
    pub fn last_key(&self, i: usize) -> Option<usize> {
        let (lead, extra) = &self.rows[i];
        extra.last().copied().or(lead.checked_sub(1))
    }

    /// Width of a packed row: lead, extra count, and the longest extra list.
    pub fn width(&self) -> usize {
        2 + self.rows.iter().map(|(_, e)| e.len()).max().unwrap_or(0)
    }

    /// The `[rows, width]` table the GPU kernel reads: per row `lead`, the extra count, the extra
    /// rows, zero-padded.
    pub fn packed(&self) -> Vec<u32> {
        self.packed_to(self.width())
    }

    /// [`VisibleKeys::packed`] with rows `w` wide (`w` >= [`VisibleKeys::width`]), so that passes
    /// of different trees can share one table shape.
    pub fn packed_to(&self, w: usize) -> Vec<u32> {
        let w = w.max(self.width());
        let mut out = vec![0u32; self.rows.len() * w];
        for (slot, (lead, extra)) in out.chunks_mut(w).zip(&self.rows) {
            slot[0] = *lead as u32;
            slot[1] = extra.len() as u32;
            for (s, &e) in slot[2..].iter_mut().zip(extra) {
                *s = e as u32;
            }
        }
        out
    }

    /// The additive mask `[n_rep * n, prefix + n]` for grouped attention with query heads stacked
    /// along the rows (0 where visible, [`MASKED`] elsewhere), or `None` when nothing is masked.
    pub fn dense_mask(&self, n_rep: usize, device: &Device) -> Result<Option<Tensor>> {
        if self.sees_all() {
            return Ok(None);
        }
        let (n, total) = (self.rows.len(), self.total);
        let mut m = vec![MASKED; n * total];
        for i in 0..n {
            for k in self.keys(i) {
                m[i * total + k] = 0.0;
            }
        }
        let t = Tensor::from_vec(m, (n, total), device)?;
        Ok(Some(if n_rep > 1 { t.repeat((n_rep, 1))? } else { t }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_rows_are_what_new_gives() {
        for prefix in [0, 1, 7, 300] {
            assert_eq!(
                VisibleKeys::one_causal(prefix),
                VisibleKeys::new(None, None, 1, prefix)
            );
            for n in [1, 2, 5] {
                assert_eq!(
                    VisibleKeys::causal(n, prefix),
                    VisibleKeys::new(None, None, n, prefix)
                );
            }
        }
    }

    #[test]
    fn causal_rows_are_leading_runs() {
        let v = VisibleKeys::new(None, None, 3, 4);
        assert_eq!(v.packed(), vec![5, 0, 6, 0, 7, 0]);
        assert!(!v.sees_all());
        assert!(VisibleKeys::new(None, None, 1, 4).sees_all());
    }

    #[test]
    fn a_tree_node_sees_its_ancestors_in_order() {
        // 0 -> 1, 0 -> 2 -> 3
        let m = BlockMask::from_parents(&[None, Some(0), Some(0), Some(2)]).unwrap();
        let v = VisibleKeys::new(Some(&m), None, 4, 10);
        assert_eq!(
            v.keys(3).collect::<Vec<_>>(),
            [(0..11).collect::<Vec<_>>(), vec![12, 13]].concat()
        );
        assert_eq!(v.keys(1).collect::<Vec<_>>(), (0..12).collect::<Vec<_>>());
        assert_eq!(v.width(), 4);
    }

    #[test]
    fn a_past_mask_hides_other_branches() {
        let past = PastMask {
            start: 3,
            visible: vec![vec![4], vec![]],
        };
        let v = VisibleKeys::new(None, Some(&past), 2, 6);
        assert_eq!(v.keys(0).collect::<Vec<_>>(), vec![0, 1, 2, 4, 6]);
        assert_eq!(v.keys(1).collect::<Vec<_>>(), vec![0, 1, 2, 6, 7]);
    }

    #[test]
    fn the_dense_mask_matches_the_lists() {
        let m = BlockMask::from_parents(&[None, Some(0), None]).unwrap();
        let v = VisibleKeys::new(Some(&m), None, 3, 2);
        let d = v.dense_mask(2, &Device::Cpu).unwrap().unwrap();
        let d = d.to_vec2::<f32>().unwrap();
        assert_eq!(d.len(), 6);
        assert_eq!(d[2], vec![0.0, 0.0, MASKED, MASKED, 0.0]);
        assert_eq!(d[5], d[2]);
    }
}
