//! The DDTree builder and walk against the paper's own code (`tests/data/ddtree-reference.json`). The case file is
//! read from `DDTREE_GOLDEN` (default `tests/data/ddtree-reference.json`).

use serde::Deserialize;
use treespec::tree::{build_ddtree, top_k_log_probs, walk};

#[derive(Deserialize)]
struct Golden {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    budget: usize,
    logits: Vec<Vec<f32>>,
    node_token_ids: Vec<u32>,
    node_depths: Vec<usize>,
    parents: Vec<i64>,
    visibility: Option<Vec<Vec<u8>>>,
    walk_posterior: Vec<u32>,
    walk_accepted: Vec<usize>,
    walk_next_token: u32,
}

fn golden_path() -> std::path::PathBuf {
    std::env::var_os("DDTREE_GOLDEN")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/ddtree-reference.json")
        })
}

#[test]
fn builder_and_walk_match_the_reference() {
    let path = golden_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let golden: Golden = serde_json::from_str(&text).expect("parse golden file");
    assert!(!golden.cases.is_empty());
    for (ci, case) in golden.cases.iter().enumerate() {
        let vocab = case.logits[0].len();
        let k = case.budget.min(vocab);
        let depths: Vec<_> = case
            .logits
            .iter()
            .map(|row| top_k_log_probs(row, k))
            .collect();
        let root = case.walk_posterior[0];
        let tree = build_ddtree(&depths, case.budget, root);

        assert_eq!(
            &tree.tokens[1..],
            case.node_token_ids.as_slice(),
            "case {ci}: node tokens"
        );
        assert_eq!(
            &tree.depths[1..],
            case.node_depths.as_slice(),
            "case {ci}: depths"
        );
        let parents: Vec<i64> = tree
            .parents
            .iter()
            .map(|p| p.map_or(-1, |p| p as i64))
            .collect();
        assert_eq!(parents, case.parents, "case {ci}: parents");
        if let Some(vis) = &case.visibility {
            let mask = tree.mask();
            for (i, row) in vis.iter().enumerate() {
                for (j, &v) in row.iter().enumerate() {
                    assert_eq!(mask.allows(i, j), v == 1, "case {ci}: visibility ({i},{j})");
                }
            }
        }
        let mut asked = vec![];
        let (accepted, next) = walk(&tree, |node| {
            asked.push(node);
            case.walk_posterior[node]
        });
        assert_eq!(accepted, case.walk_accepted, "case {ci}: accepted");
        assert_eq!(next, case.walk_next_token, "case {ci}: next token");
        assert_eq!(
            asked, accepted,
            "case {ci}: the walk reads only the accepted path"
        );
    }
}

#[test]
fn budget_edge_cases() {
    let logits = [vec![0.0f32, 1.0, 2.0], vec![2.0, 1.0, 0.0]];
    let depths: Vec<_> = logits.iter().map(|r| top_k_log_probs(r, 3)).collect();
    let t = build_ddtree(&depths, 0, 7);
    assert_eq!(t.len(), 1);
    let t = build_ddtree(&depths, 1, 7);
    assert_eq!(t.tokens, vec![7, 2]);
    // The budget can exceed what the depths allow (3 + 9 nodes): the tree stops when the heap empties.
    let t = build_ddtree(&depths, 100, 7);
    assert_eq!(t.num_drafted(), 12);
    assert_eq!(t.max_depth(), 2);
    // Depth 1 only: a star of the k best tokens.
    let t = build_ddtree(&depths[..1], 5, 7);
    assert_eq!(t.tokens, vec![7, 2, 1, 0]);
}
