//! The order in which `gdn_tree` (`kernels/gdn.cu`) walks a block of Gated DeltaNet rows: every
//! row once, depth first, so that a row's state is its parent's updated once more, never its
//! whole path replayed. A row continues the state a block's lanes hold when its parent came just
//! before it; otherwise it restores its parent's state from a slot of shared memory, where a
//! node with several children saved it. Children are walked largest subtree last, and a slot is
//! freed when that last child restores it, so a walk of `n` rows holds at most [`slots`] slots
//! (a slot's owner lies in a smaller subtree of the previous owner: at most half of it).
//!
//! The schedule as the kernel reads it: entry 0 the slot the committed state is saved in before
//! the walk, plus one (0: none); entry `1 + t`, the walk's `t`-th row: bits 0-15 the row, 16-23
//! the slot restored before its update plus one, 24-31 the slot saved after it plus one.

use crate::error::{Error, Result};

/// Most rows a schedule names (16 bits of an entry).
pub const MAX_ROWS: usize = 1 << 16;

/// Slots a walk of `n` rows may hold at once: `floor(log2(n + 2)) - 1`. The `k`-th nested slot's
/// owner has at least two children and lies in a non-largest subtree of the one before, so the
/// virtual root's `n + 1` nodes are at least `2^(k + 1) - 1`.
pub fn slots(n: usize) -> usize {
    ((n + 2).ilog2() as usize).saturating_sub(1)
}

/// Bytes of dynamic shared memory a `gdn_tree` block of `threads` lanes needs: `slots` saved
/// states (`GDN_CHUNK` = 32 floats a lane) and a schedule of `entries` (`n + 1`, or 0 for rows
/// walked in order).
pub fn shared_bytes(slots: usize, threads: u32, entries: usize) -> u32 {
    (slots * 32 * threads as usize * 4 + 4 * entries) as u32
}

/// Whether a walk ([`schedule`]) saves or restores any state: a tree (or several rows continuing
/// the committed state), not a chain walked in order, which needs no slots.
pub fn branches(walk: &[u32]) -> bool {
    walk.first().is_some_and(|&e| e != 0) || walk.iter().skip(1).any(|&op| op >> 16 != 0)
}

/// The walk of a block whose row `i` continues `parents[i]` (each below `i`; `None`: the
/// committed state), as the kernel reads it (module comment).
pub fn schedule(parents: &[Option<usize>]) -> Result<Vec<u32>> {
    let n = parents.len();
    if n > MAX_ROWS {
        return Err(Error::InvalidArgument(format!(
            "a Gated DeltaNet tree of {n} rows (a walk names at most {MAX_ROWS})"
        )));
    }
    // Children in row order; the virtual root (the committed state) is node n.
    let mut kids = vec![vec![]; n + 1];
    for (i, p) in parents.iter().enumerate() {
        match *p {
            Some(p) if p >= i => {
                return Err(Error::InvalidArgument(format!(
                    "row {i} of a Gated DeltaNet tree continues row {p}, not one before it"
                )))
            }
            p => kids[p.unwrap_or(n)].push(i),
        }
    }
    let mut size = vec![1usize; n + 1];
    for i in (0..n).rev() {
        size[parents[i].unwrap_or(n)] += size[i];
    }
    // A node's children in walking order: the largest subtree (the last of equals) last.
    let order = |v: usize| -> Vec<usize> {
        let mut c = kids[v].clone();
        if let Some(hi) = (0..c.len()).max_by_key(|&j| (size[c[j]], j)) {
            let heavy = c.remove(hi);
            c.push(heavy);
        }
        c
    };
    // Pending rows: (row, slot restored plus one, whether that restore frees the slot).
    let mut stack: Vec<(usize, u32, bool)> = vec![];
    let push = |stack: &mut Vec<(usize, u32, bool)>, c: &[usize], save: u32| {
        for (j, &k) in c.iter().enumerate().rev() {
            let restore = if j == 0 { 0 } else { save };
            stack.push((k, restore, j > 0 && j + 1 == c.len()));
        }
    };
    // A node of several children takes the next slot (its number plus one), others none.
    let take = |live: &mut u32, children: usize| -> u32 {
        match children >= 2 {
            true => {
                *live += 1;
                *live
            }
            false => 0,
        }
    };
    let mut live = 0u32;
    let mut out = Vec::with_capacity(n + 1);
    let root = order(n);
    let root_save = take(&mut live, root.len());
    out.push(root_save);
    push(&mut stack, &root, root_save);
    while let Some((v, restore, free)) = stack.pop() {
        if free {
            live -= 1;
        }
        let c = order(v);
        let save = take(&mut live, c.len());
        debug_assert!(live as usize <= slots(n));
        out.push(v as u32 | restore << 16 | save << 24);
        push(&mut stack, &c, save);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a schedule as the kernel would, with a state named by the row it last took in (n:
    /// the committed state): each row must start from its parent's, once, within the slots.
    fn check(parents: &[Option<usize>]) {
        let n = parents.len();
        let s = schedule(parents).unwrap();
        assert_eq!(s.len(), n + 1);
        let mut slot = vec![usize::MAX; slots(n)];
        let mut held = n;
        if s[0] != 0 {
            slot[s[0] as usize - 1] = n;
        }
        let mut seen = vec![false; n];
        for &op in &s[1..] {
            let (row, restore, save) = (
                (op & 0xffff) as usize,
                (op >> 16 & 0xff) as usize,
                (op >> 24) as usize,
            );
            if restore != 0 {
                held = slot[restore - 1];
            }
            assert_eq!(held, parents[row].unwrap_or(n), "row {row} of {parents:?}");
            assert!(!seen[row]);
            seen[row] = true;
            held = row;
            if save != 0 {
                slot[save - 1] = row;
            }
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn every_row_starts_from_its_parent_within_the_slots() {
        check(&[]);
        check(&[None]);
        for n in [2, 7, 64, 255] {
            let chain: Vec<_> = (0..n).map(|i: usize| i.checked_sub(1)).collect();
            check(&chain);
            check(&vec![None; n]);
            let binary: Vec<_> = (0..n)
                .map(|i: usize| i.checked_sub(1).map(|j| j / 2))
                .collect();
            check(&binary);
        }
        // Random trees, some with several roots.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for n in 1..200 {
            let parents: Vec<_> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = (x % (i as u64 + 1)) as usize;
                    p.checked_sub(1)
                        .or((i > 0 && !x.is_multiple_of(7)).then_some(0))
                })
                .collect();
            check(&parents);
        }
    }

    #[test]
    fn a_chain_walks_in_order_with_no_slot() {
        let s = schedule(&[None, Some(0), Some(1)]).unwrap();
        assert_eq!(s, vec![0, 0, 1, 2]);
        assert!(!branches(&s));
        let chain: Vec<_> = (0..64).map(|i: usize| i.checked_sub(1)).collect();
        assert!(!branches(&schedule(&chain).unwrap()));
        // A fork, and two rows on the committed state, save and restore.
        assert!(branches(&schedule(&[None, Some(0), Some(0)]).unwrap()));
        assert!(branches(&schedule(&[None, None]).unwrap()));
        assert_eq!(slots(1), 0);
        assert_eq!(slots(64), 5);
        assert_eq!(slots(256), 7);
    }

    #[test]
    fn a_row_after_its_own_parent_is_refused() {
        let e = schedule(&[Some(0)]).unwrap_err().to_string();
        assert!(e.contains("row 0"), "{e}");
    }
}
