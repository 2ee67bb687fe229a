//! The decoder's contract on tiny random f32 models of each family: blocks equal token-by-token
//! feeding, truncate and keep leave the cache as if only the kept tokens were fed, and masks hide
//! exactly what they say.

mod common;

use candle_core::Tensor;
use common::{max_abs_diff, tiny_decoder};
use treespec::model::config::Family;
use treespec::model::decoder::{Batch, BlockMask, Decoder, PastMask};

const FAMILIES: [Family; 3] = [Family::Llama, Family::Qwen2, Family::Qwen3];
const PREFIX: [u32; 5] = [3, 17, 42, 8, 29];
const BLOCK: [u32; 6] = [11, 5, 60, 23, 1, 37];

fn one_by_one(m: &mut Decoder, tokens: &[u32]) -> Tensor {
    let rows: Vec<Tensor> = tokens
        .iter()
        .map(|&t| {
            let pos = m.len();
            m.forward(&Batch::causal(&[t], pos))
                .unwrap()
                .logits
                .unwrap()
        })
        .collect();
    Tensor::cat(&rows, 0).unwrap()
}

#[test]
fn block_forward_equals_token_by_token() {
    for fam in FAMILIES {
        let mut a = tiny_decoder(fam, 1, 64);
        let mut b = tiny_decoder(fam, 1, 64);
        a.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        b.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let block = a
            .forward(&Batch::causal(&BLOCK, PREFIX.len()).all_logits())
            .unwrap()
            .logits
            .unwrap();
        let single = one_by_one(&mut b, &BLOCK);
        let d = max_abs_diff(&block, &single);
        assert!(d < 1e-4, "{fam:?}: block vs one-by-one differ by {d}");
        assert_eq!(a.len(), PREFIX.len() + BLOCK.len());
    }
}

#[test]
fn truncate_then_refeed_reproduces_logits() {
    for fam in FAMILIES {
        let mut m = tiny_decoder(fam, 2, 64);
        m.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let first = m
            .forward(&Batch::causal(&BLOCK, PREFIX.len()).all_logits())
            .unwrap()
            .logits
            .unwrap();
        // A rejected draft: drop the block, feed something else, drop it again, re-feed.
        m.truncate(PREFIX.len());
        m.forward(&Batch::causal(&[9, 9, 9], PREFIX.len())).unwrap();
        m.truncate(PREFIX.len());
        assert_eq!(m.len(), PREFIX.len());
        let again = m
            .forward(&Batch::causal(&BLOCK, PREFIX.len()).all_logits())
            .unwrap()
            .logits
            .unwrap();
        let d = max_abs_diff(&first, &again);
        assert!(d < 1e-6, "{fam:?}: re-fed logits differ by {d}");
    }
}

#[test]
fn keep_rows_equals_cache_of_kept_tokens() {
    // A tree block: 0 and 1 are siblings under the last committed token; 2 is a child of 0,
    // 3 a child of 1, 4 a child of 2. Keeping the path 0 -> 2 -> 4 must leave the cache exactly
    // as feeding those three tokens causally.
    let tokens = [14u32, 7, 33, 50, 21];
    let parents = [None, None, Some(0), Some(1), Some(2)];
    let depths = [0usize, 0, 1, 1, 2];
    for fam in FAMILIES {
        let mut tree = tiny_decoder(fam, 3, 64);
        let mut plain = tiny_decoder(fam, 3, 64);
        tree.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        plain.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let base = PREFIX.len();
        let batch = Batch::causal(&tokens, base)
            .with_positions(depths.iter().map(|d| base + d).collect())
            .with_mask(BlockMask::from_parents(&parents).unwrap())
            .all_logits();
        let tree_logits = tree.forward(&batch).unwrap().logits.unwrap();
        tree.keep(base, &[0, 2, 4]).unwrap();
        assert_eq!(tree.len(), base + 3);

        let path = [tokens[0], tokens[2], tokens[4]];
        let path_logits = plain
            .forward(&Batch::causal(&path, base).all_logits())
            .unwrap()
            .logits
            .unwrap();
        // The tree pass scored the path's nodes exactly as the causal pass did.
        let kept_rows = tree_logits
            .index_select(
                &Tensor::new(&[0u32, 2, 4], tree_logits.device()).unwrap(),
                0,
            )
            .unwrap();
        let d0 = max_abs_diff(&kept_rows, &path_logits);
        assert!(d0 < 1e-4, "{fam:?}: tree rows vs path differ by {d0}");

        // And later tokens see the same cache.
        let next = [19u32, 2, 44];
        let after_keep = tree
            .forward(&Batch::causal(&next, base + 3).all_logits())
            .unwrap()
            .logits
            .unwrap();
        let after_plain = plain
            .forward(&Batch::causal(&next, base + 3).all_logits())
            .unwrap()
            .logits
            .unwrap();
        let d = max_abs_diff(&after_keep, &after_plain);
        assert!(d < 1e-4, "{fam:?}: logits after keep differ by {d}");
    }
}

#[test]
fn mask_hides_exactly_what_it_should() {
    let toks = [4u32, 12, 31, 55];
    for fam in FAMILIES {
        let base = PREFIX.len();
        let mut causal = tiny_decoder(fam, 4, 64);
        causal.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let full = causal
            .forward(&Batch::causal(&toks, base).all_logits())
            .unwrap()
            .logits
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();

        // Tokens 2 and 3 may not see token 1 (a side branch, as in a tree).
        let mut mask = BlockMask::causal(4);
        mask.set(2, 1, false);
        mask.set(3, 1, false);
        let mut masked = tiny_decoder(fam, 4, 64);
        masked.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let hid = masked
            .forward(&Batch::causal(&toks, base).with_mask(mask).all_logits())
            .unwrap()
            .logits
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        for r in 0..2 {
            let d = full[r]
                .iter()
                .zip(&hid[r])
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                d < 1e-5,
                "{fam:?}: row {r} changed by {d} though its view did not"
            );
        }
        for r in 2..4 {
            let d = full[r]
                .iter()
                .zip(&hid[r])
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                d > 1e-3,
                "{fam:?}: row {r} did not change when token 1 was hidden"
            );
        }

        // Rows 2 and 3 equal a run in which token 1 was never there (same positions).
        let mut without = tiny_decoder(fam, 4, 64);
        without.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let r = without
            .forward(
                &Batch::causal(&[toks[0], toks[2], toks[3]], base)
                    .with_positions(vec![base, base + 2, base + 3])
                    .all_logits(),
            )
            .unwrap()
            .logits
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        for (r_without, r_masked) in [(1, 2), (2, 3)] {
            let d = r[r_without]
                .iter()
                .zip(&hid[r_masked])
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                d < 1e-4,
                "{fam:?}: masked row {r_masked} differs from the run without token 1 by {d}"
            );
        }
    }
}

/// A tree fed over several passes: cached rows of other branches, hidden by a past mask, change
/// nothing; the listed ancestors are seen.
#[test]
fn past_mask_hides_cached_branches() {
    let (a, b, c) = (9u32, 14u32, 33u32);
    let base = PREFIX.len();
    for fam in FAMILIES {
        // Reference: the prefix, then b, then c (b's child), fed plainly.
        let mut plain = tiny_decoder(fam, 7, 64);
        plain.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let want = plain
            .forward(&Batch::causal(&[b, c], base).all_logits())
            .unwrap()
            .logits
            .unwrap();

        // The tree: a and b are siblings at depth 1 (one pass), then c under b (second pass).
        let mut m = tiny_decoder(fam, 7, 64);
        m.forward(&Batch::causal(&PREFIX, 0)).unwrap();
        let siblings = m
            .forward(
                &Batch::causal(&[a, b], base)
                    .with_positions(vec![base, base])
                    .with_mask(BlockMask::from_parents(&[None, None]).unwrap())
                    .all_logits(),
            )
            .unwrap()
            .logits
            .unwrap();
        let got_c = m
            .forward(
                &Batch::causal(&[c], base + 2)
                    .with_positions(vec![base + 1])
                    .with_past_mask(PastMask {
                        start: base,
                        visible: vec![vec![base + 1]],
                    }),
            )
            .unwrap()
            .logits
            .unwrap();
        let b_row = siblings.get(1).unwrap().unsqueeze(0).unwrap();
        assert!(max_abs_diff(&b_row, &want.get(0).unwrap().unsqueeze(0).unwrap()) < 1e-4);
        let d = max_abs_diff(&got_c, &want.get(1).unwrap().unsqueeze(0).unwrap());
        assert!(d < 1e-4, "{fam:?}: c under b differs by {d}");

        // Without the past mask, c would see its uncle a too: different logits.
        m.truncate(base + 2);
        let leaky = m
            .forward(&Batch::causal(&[c], base + 2).with_positions(vec![base + 1]))
            .unwrap()
            .logits
            .unwrap();
        assert!(
            max_abs_diff(&leaky, &got_c) > 1e-3,
            "{fam:?}: a was not hidden"
        );

        // A past mask naming rows outside the cache is an error.
        let bad = Batch::causal(&[c], base + 2).with_past_mask(PastMask {
            start: base,
            visible: vec![vec![base + 5]],
        });
        assert!(m.forward(&bad).is_err());
    }
}

#[test]
fn hidden_states_and_logit_rows() {
    let mut m = tiny_decoder(Family::Qwen3, 5, 64);
    let out = m
        .forward(
            &Batch::causal(&PREFIX, 0)
                .with_logits_rows(vec![4, 1])
                .with_hidden_layers(vec![1, 0]),
        )
        .unwrap();
    let logits = out.logits.unwrap();
    assert_eq!(logits.dims(), &[2, 61]);
    assert_eq!(out.hidden.len(), 2);
    assert_eq!(out.hidden[0].dims(), &[5, 32]);
    // The last layer's hidden state gives the logits through the final norm and head.
    let from_hidden = m.logits_from_hidden(&out.hidden[0]).unwrap();
    let row4 = from_hidden.get(4).unwrap().unsqueeze(0).unwrap();
    let d = max_abs_diff(&row4, &logits.get(0).unwrap().unsqueeze(0).unwrap());
    assert!(d < 1e-5);
}

#[test]
fn bad_calls_are_errors_not_panics() {
    let mut m = tiny_decoder(Family::Llama, 6, 8);
    assert!(m.forward(&Batch::causal(&[], 0)).is_err());
    assert!(
        m.forward(&Batch::causal(&[1000], 0)).is_err(),
        "token outside the vocabulary"
    );
    assert!(m
        .forward(&Batch::causal(&[1, 2], 0).with_logits_rows(vec![2]))
        .is_err());
    assert!(
        m.forward(&Batch::causal(&[1; 9], 0)).is_err(),
        "context overflow"
    );
    assert!(m.keep(0, &[3]).is_err(), "keep outside the block");
    assert!(BlockMask::from_parents(&[Some(0)]).is_err(), "self-parent");
}

#[test]
fn from_parents_builds_ancestor_masks() {
    let m = BlockMask::from_parents(&[None, Some(0), Some(0), Some(2), None]).unwrap();
    let expect = [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [1, 0, 1, 1, 0],
        [0, 0, 0, 0, 1],
    ];
    for (i, row) in expect.iter().enumerate() {
        for (j, &e) in row.iter().enumerate() {
            assert_eq!(m.allows(i, j), e == 1, "({i},{j})");
        }
    }
    assert!(BlockMask::causal(4).is_causal());
    assert!(!m.is_causal());
}
