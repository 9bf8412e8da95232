//! REST's five draft buffers for a draft tree, built here so the DraftRetriever-compatible face
//! costs no more per call than REST's own reader (building them in Python cost 10x the search).
//!
//! Node order is the tree's BFS order; buffer row 0 is the root (the last context token).

use crate::search::DraftTree;
use std::collections::HashMap;

/// REST pads token paths with -2 and retrieve indices with -1.
pub const TOKEN_PAD: i32 = -2;
pub const INDEX_PAD: i32 = -1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestBuffers {
    /// One row per node: the token path from depth 1 down to it, padded with -2.
    pub retrieved_token_list: Vec<Vec<i32>>,
    /// [n+1, n+1]: 1 where row may attend to column (the root, its ancestors, itself).
    pub draft_attn_mask: Vec<Vec<i32>>,
    /// [n+1]: where each node's token sits in `[root] + per-depth unique tokens` (each depth
    /// padded to the widest), as REST's caller lays out its candidates.
    pub tree_indices: Vec<i32>,
    /// [n+1]: depth of each node, 0 for the root.
    pub draft_position_ids: Vec<i32>,
    /// One row per leaf (node order): [0, node+1 along its path], padded with -1.
    pub retrieve_indices: Vec<Vec<i32>>,
}

pub fn rest_buffers(tree: &DraftTree) -> RestBuffers {
    let n = tree.len();
    if n == 0 {
        return RestBuffers::default();
    }
    let max_depth = tree.depth.iter().copied().max().unwrap_or(0) as usize;

    // Paths by walking parents; a parent always precedes its child in BFS order.
    let mut paths: Vec<Vec<usize>> = Vec::with_capacity(n);
    for i in 0..n {
        let mut path = match tree.parents[i] {
            p if p >= 0 => paths[p as usize].clone(),
            _ => Vec::with_capacity(max_depth),
        };
        path.push(i);
        paths.push(path);
    }

    let retrieved_token_list: Vec<Vec<i32>> = paths
        .iter()
        .map(|p| {
            let mut row: Vec<i32> = p.iter().map(|&j| tree.tokens[j] as i32).collect();
            row.resize(max_depth, TOKEN_PAD);
            row
        })
        .collect();

    // Per-depth unique tokens in order of first appearance down each column.
    let mut slots: Vec<HashMap<u32, usize>> = vec![HashMap::new(); max_depth];
    for p in &paths {
        for (d, &j) in p.iter().enumerate() {
            let next = slots[d].len();
            slots[d].entry(tree.tokens[j]).or_insert(next);
        }
    }
    let topk = slots.iter().map(HashMap::len).max().unwrap_or(0);

    let mut draft_attn_mask = vec![vec![0i32; n + 1]; n + 1];
    draft_attn_mask[0][0] = 1;
    for (i, p) in paths.iter().enumerate() {
        let row = &mut draft_attn_mask[i + 1];
        row[0] = 1;
        for &j in p {
            row[j + 1] = 1;
        }
    }

    let mut tree_indices = Vec::with_capacity(n + 1);
    tree_indices.push(0);
    let mut draft_position_ids = Vec::with_capacity(n + 1);
    draft_position_ids.push(0);
    for i in 0..n {
        let d = tree.depth[i] as usize;
        tree_indices.push((slots[d - 1][&tree.tokens[i]] + topk * (d - 1) + 1) as i32);
        draft_position_ids.push(d as i32);
    }

    let mut has_child = vec![false; n];
    for &p in &tree.parents {
        if p >= 0 {
            has_child[p as usize] = true;
        }
    }
    let retrieve_indices = (0..n)
        .filter(|&i| !has_child[i])
        .map(|leaf| {
            let mut row = Vec::with_capacity(max_depth + 1);
            row.push(0);
            row.extend(paths[leaf].iter().map(|&j| j as i32 + 1));
            row.resize(max_depth + 1, INDEX_PAD);
            row
        })
        .collect();

    RestBuffers { retrieved_token_list, draft_attn_mask, tree_indices, draft_position_ids, retrieve_indices }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(tokens: &[u32], parents: &[i32]) -> DraftTree {
        let mut depth = Vec::new();
        for &p in parents {
            depth.push(if p < 0 { 1 } else { depth[p as usize] + 1 });
        }
        DraftTree { tokens: tokens.to_vec(), parents: parents.to_vec(), support: vec![1; tokens.len()], depth, ..Default::default() }
    }

    #[test]
    fn two_siblings_as_rest_lays_them_out() {
        let b = rest_buffers(&tree(&[4, 5], &[-1, -1]));
        assert_eq!(b.retrieved_token_list, vec![vec![4], vec![5]]);
        assert_eq!(b.draft_attn_mask, vec![vec![1, 0, 0], vec![1, 1, 0], vec![1, 0, 1]]);
        assert_eq!(b.tree_indices, vec![0, 1, 2]);
        assert_eq!(b.draft_position_ids, vec![0, 1, 1]);
        assert_eq!(b.retrieve_indices, vec![vec![0, 1], vec![0, 2]]);
    }

    #[test]
    fn a_deeper_tree_pads_paths_and_shares_column_slots() {
        // 7 -> (8 -> 9), 8 ; the second depth-1 node repeats no token: slots per depth
        let b = rest_buffers(&tree(&[7, 8, 8, 9], &[-1, -1, 0, 2]));
        assert_eq!(b.retrieved_token_list, vec![vec![7, -2, -2], vec![8, -2, -2], vec![7, 8, -2], vec![7, 8, 9]]);
        assert_eq!(b.tree_indices, vec![0, 1, 2, 3, 5]);
        assert_eq!(b.draft_position_ids, vec![0, 1, 1, 2, 3]);
        assert_eq!(b.retrieve_indices, vec![vec![0, 2, -1, -1], vec![0, 1, 3, 4]]);
        assert_eq!(b.draft_attn_mask[4], vec![1, 1, 0, 1, 1]);
    }

    #[test]
    fn empty_tree_gives_empty_buffers() {
        assert_eq!(rest_buffers(&DraftTree::default()), RestBuffers::default());
    }
}
