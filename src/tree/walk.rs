//! The tree walk: from the root, follow the child whose token equals the target's choice at the
//! current node; stop at the first node whose choice is not a child, and emit that choice.

use super::DraftTree;

/// Walk `tree`, asking `choose(node)` for the target's token at a node (argmax at temperature 0,
/// a sample of the node's processed distribution otherwise). `choose` is called only for nodes on
/// the accepted path, in order, so sampling stays lazy.
///
/// Returns the accepted node indices (starting with the root, 0) and the final token, which is
/// emitted after the accepted drafted tokens and becomes the next root.
pub fn walk(tree: &DraftTree, mut choose: impl FnMut(usize) -> u32) -> (Vec<usize>, u32) {
    let children = tree.children();
    let mut accepted = vec![0];
    let mut node = 0;
    loop {
        let y = choose(node);
        match children[node].iter().find(|&&c| tree.tokens[c] == y) {
            Some(&c) => {
                accepted.push(c);
                node = c;
            }
            None => return (accepted, y),
        }
    }
}
