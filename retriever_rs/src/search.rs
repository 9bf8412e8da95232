//! From the end of a context to a draft tree: longest matching suffix, an even sample of its
//! occurrences, a frequency trie of what followed them, and the best-supported connected subtree.

use crate::error::{IndexError, Result};
use crate::index::{Corpus, CorpusFn, Positions, Symbols};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchParams {
    /// Most nodes in the returned tree.
    pub max_nodes: usize,
    /// Longest continuation (tree depth) in tokens.
    pub max_depth: usize,
    /// Most occurrences of the matched suffix that are read.
    pub max_matches: usize,
    /// Shortest context suffix worth matching.
    pub min_suffix: usize,
    /// Longest context suffix tried first.
    pub max_suffix: usize,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams { max_nodes: 64, max_depth: 10, max_matches: 256, min_suffix: 2, max_suffix: 16 }
    }
}

/// Upper bounds of the search knobs: far above any useful value, low enough that no value can
/// ask for an allocation that fails (which would abort the process).
pub const MAX_NODES: usize = 1 << 16;
pub const MAX_MATCHES: usize = 1 << 20;
pub const MAX_SUFFIX: usize = 1 << 20;

impl SearchParams {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(IndexError::InvalidArgument(m.to_owned()));
        if self.max_nodes > MAX_NODES {
            return Err(IndexError::InvalidArgument(format!("max_nodes must be <= {MAX_NODES}, got {}", self.max_nodes)));
        }
        if self.max_matches > MAX_MATCHES {
            return Err(IndexError::InvalidArgument(format!("max_matches must be <= {MAX_MATCHES}, got {}", self.max_matches)));
        }
        if self.max_suffix > MAX_SUFFIX {
            return Err(IndexError::InvalidArgument(format!("max_suffix must be <= {MAX_SUFFIX}, got {}", self.max_suffix)));
        }
        if self.min_suffix == 0 {
            return bad("min_suffix must be at least 1");
        }
        if self.max_suffix < self.min_suffix {
            return bad("max_suffix must be >= min_suffix");
        }
        if self.max_depth > u16::MAX as usize {
            return bad("max_depth must be <= 65535");
        }
        Ok(())
    }
}

/// The flat tree of DESIGN.md: nodes in BFS order, the root (last context token) implicit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftTree {
    pub tokens: Vec<u32>,
    /// Index of the parent node, -1 for children of the root.
    pub parents: Vec<i32>,
    /// 1-based depth.
    pub depth: Vec<u32>,
    /// How many sampled occurrences continue through this node.
    pub support: Vec<u32>,
    /// Length of the context suffix that matched (0 when nothing matched).
    pub match_len: usize,
    /// Occurrences of that suffix in the datastore.
    pub match_count: u64,
    /// Occurrences actually read (<= max_matches).
    pub sampled: usize,
}

impl DraftTree {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// How the suffix at `pos` compares with `pattern`, a document end sorting before any token.
/// `Equal` means the suffix starts with the whole pattern.
fn compare<T: Symbols + ?Sized, S: Positions + ?Sized>(c: &Corpus<T, S>, pos: u64, pattern: &[u32]) -> Ordering {
    let n = c.tokens.len() as u64;
    for (k, &want) in pattern.iter().enumerate() {
        let q = pos + k as u64;
        if q >= n {
            return Ordering::Less; // only on corrupt data: the suffix array is range-checked
        }
        match c.tokens.at(q as usize).cmp(&want) {
            Ordering::Equal => {}
            other => return other,
        }
        if k + 1 < pattern.len() && c.is_doc_last(q) {
            return Ordering::Less; // the document ends inside the pattern
        }
    }
    Ordering::Equal
}

/// Tokens following an occurrence that ends at `last` (inclusive), up to `max` of them and
/// never past the end of its document.
fn continuation<'c, T: Symbols + ?Sized, S: Positions + ?Sized>(
    c: &'c Corpus<T, S>,
    last: u64,
    max: usize,
) -> impl Iterator<Item = u32> + 'c {
    let n = c.tokens.len() as u64;
    let mut q = last;
    let mut left = max;
    std::iter::from_fn(move || {
        if left == 0 || c.is_doc_last(q) || q + 1 >= n {
            return None;
        }
        q += 1;
        left -= 1;
        Some(c.tokens.at(q as usize))
    })
}

/// First suffix-array index whose suffix is not Less than `pattern`, and whether that suffix
/// starts with the pattern (i.e. whether the pattern occurs at all).
fn lower_bound<T: Symbols + ?Sized, S: Positions + ?Sized>(c: &Corpus<T, S>, pattern: &[u32]) -> Result<(usize, bool)> {
    let (mut a, mut b) = (0usize, c.suffixes.len());
    while a < b {
        let mid = a + (b - a) / 2;
        if compare(c, c.suffix(mid)?, pattern) == Ordering::Less {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    let found = a < c.suffixes.len() && compare(c, c.suffix(a)?, pattern) == Ordering::Equal;
    Ok((a, found))
}

/// End of the run of suffixes starting with `pattern` that begins at `lo`. Galloping: most
/// runs are short, and then only suffix-array entries next to `lo` are touched.
fn run_end<T: Symbols + ?Sized, S: Positions + ?Sized>(c: &Corpus<T, S>, pattern: &[u32], lo: usize) -> Result<usize> {
    let n = c.suffixes.len();
    let matches = |i: usize| -> Result<bool> { Ok(compare(c, c.suffix(i)?, pattern) == Ordering::Equal) };
    // Invariant: suffix `a` matches; suffix `b` does not (or b == n).
    let (mut a, mut step) = (lo, 1usize);
    let mut b = loop {
        let probe = lo.saturating_add(step);
        if probe >= n {
            break n;
        }
        if !matches(probe)? {
            break probe;
        }
        a = probe;
        step *= 2;
    };
    while b - a > 1 {
        let mid = a + (b - a) / 2;
        if matches(mid)? {
            a = mid;
        } else {
            b = mid;
        }
    }
    Ok(b)
}

/// The longest suffix of `context` (between min and max length) that occurs in the corpus,
/// with its suffix-array interval. Occurrence is monotone in the length (x·P occurs => P
/// occurs), so binary search over the length finds the same suffix as trying longest to
/// shortest; each probe is a single lower-bound search, and only the winner's run end is found.
fn longest_match<T: Symbols + ?Sized, S: Positions + ?Sized>(
    c: &Corpus<T, S>,
    context: &[u32],
    p: &SearchParams,
) -> Result<Option<(usize, (usize, usize))>> {
    let longest = p.max_suffix.min(context.len());
    if longest < p.min_suffix || c.suffixes.len() == 0 {
        return Ok(None);
    }
    let suffix = |len: usize| &context[context.len() - len..];
    let (first_lo, found) = lower_bound(c, suffix(p.min_suffix))?;
    if !found {
        return Ok(None);
    }
    let mut best = (p.min_suffix, first_lo);
    let (mut lo, mut hi) = (p.min_suffix + 1, longest);
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let (at, found) = lower_bound(c, suffix(mid))?;
        if found {
            best = (mid, at);
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    let (len, start) = best;
    Ok(Some((len, (start, run_end(c, suffix(len), start)?))))
}

/// `k` suffix-array indices spread evenly over [lo, hi): deterministic, and not biased
/// towards the lexicographically smallest continuations as taking the first k would be.
pub fn even_sample(lo: usize, hi: usize, k: usize) -> impl Iterator<Item = usize> {
    let count = (hi - lo) as u128;
    let k = k.min(hi - lo);
    (0..k).map(move |i| lo + (i as u128 * count / k as u128) as usize)
}

const NONE: u32 = u32::MAX;

/// A trie node in a flat arena; children form a singly linked list (no allocation per node).
struct TrieNode {
    token: u32,
    parent: u32,
    first_child: u32,
    next_sibling: u32,
    depth: u32,
    count: u32,
}

/// Frequency trie of continuations; node 0 is the root.
pub struct Trie {
    nodes: Vec<TrieNode>,
}

impl Default for Trie {
    fn default() -> Self {
        Trie::with_capacity(1)
    }
}

impl Trie {
    pub fn with_capacity(nodes: usize) -> Self {
        let mut v = Vec::with_capacity(nodes.max(1));
        v.push(TrieNode { token: 0, parent: NONE, first_child: NONE, next_sibling: NONE, depth: 0, count: 0 });
        Trie { nodes: v }
    }

    fn children(&self, id: usize) -> impl Iterator<Item = usize> + '_ {
        let mut next = self.nodes[id].first_child;
        std::iter::from_fn(move || {
            (next != NONE).then(|| {
                let cur = next as usize;
                next = self.nodes[cur].next_sibling;
                cur
            })
        })
    }

    pub fn insert(&mut self, path: impl IntoIterator<Item = u32>) {
        let mut cur = 0usize;
        for token in path {
            let found = self.children(cur).find(|&ch| self.nodes[ch].token == token);
            let next = match found {
                Some(ch) => ch,
                None => {
                    let id = self.nodes.len();
                    let parent = &self.nodes[cur];
                    let node = TrieNode {
                        token,
                        parent: cur as u32,
                        first_child: NONE,
                        next_sibling: parent.first_child,
                        depth: parent.depth + 1,
                        count: 0,
                    };
                    self.nodes.push(node);
                    self.nodes[cur].first_child = id as u32;
                    id
                }
            };
            self.nodes[next].count += 1;
            cur = next;
        }
    }

    /// The `max_nodes` best-supported nodes as a connected subtree, in BFS order.
    ///
    /// Best-first from the root: a child never has more support than its parent, so this is
    /// the global top-k by support that stays connected. Ties go to the shallower node, then the
    /// one whose parent was chosen first, then the smaller token id: deterministic.
    pub fn top_subtree(&self, max_nodes: usize) -> DraftTree {
        // (support, shallower, earlier parent, smaller token, node)
        type Key = (u32, Reverse<u32>, Reverse<usize>, Reverse<u32>, usize);
        let key = |id: usize, parent_rank: usize| -> Key {
            let n = &self.nodes[id];
            (n.count, Reverse(n.depth), Reverse(parent_rank), Reverse(n.token), id)
        };
        let mut heap: BinaryHeap<Key> = self.children(0).map(|ch| key(ch, 0)).collect();
        let mut chosen: Vec<usize> = Vec::with_capacity(max_nodes.min(self.nodes.len()));
        while chosen.len() < max_nodes {
            let Some((.., id)) = heap.pop() else { break };
            chosen.push(id);
            let rank = chosen.len();
            heap.extend(self.children(id).map(|ch| key(ch, rank)));
        }
        self.bfs_order(&chosen)
    }

    /// Lay out chosen nodes by depth; siblings grouped under their parent, most supported first.
    fn bfs_order(&self, chosen: &[usize]) -> DraftTree {
        let mut out_index = vec![usize::MAX; self.nodes.len()];
        let mut by_depth: Vec<Vec<usize>> = Vec::new();
        for &id in chosen {
            let d = self.nodes[id].depth as usize;
            if by_depth.len() < d {
                by_depth.resize_with(d, Vec::new);
            }
            by_depth[d - 1].push(id);
        }
        let mut tree = DraftTree::default();
        for level in &mut by_depth {
            level.sort_by_key(|&id| {
                let n = &self.nodes[id];
                let parent_out = if n.parent == 0 { 0 } else { out_index[n.parent as usize] + 1 };
                (parent_out, Reverse(n.count), n.token)
            });
            for &id in level.iter() {
                let n = &self.nodes[id];
                out_index[id] = tree.tokens.len();
                tree.tokens.push(n.token);
                tree.parents.push(if n.parent == 0 { -1 } else { out_index[n.parent as usize] as i32 });
                tree.depth.push(n.depth);
                tree.support.push(n.count);
            }
        }
        tree
    }
}

/// One search, generic over the storage widths.
pub struct Search<'a> {
    pub context: &'a [u32],
    pub params: &'a SearchParams,
}

impl CorpusFn<Result<DraftTree>> for Search<'_> {
    fn call<T: Symbols + ?Sized, S: Positions + ?Sized>(self, c: &Corpus<T, S>) -> Result<DraftTree> {
        search_corpus(c, self.context, self.params)
    }
}

pub fn search_corpus<T: Symbols + ?Sized, S: Positions + ?Sized>(
    c: &Corpus<T, S>,
    context: &[u32],
    p: &SearchParams,
) -> Result<DraftTree> {
    p.validate()?;
    let Some((match_len, (lo, hi))) = longest_match(c, context, p)? else {
        return Ok(DraftTree::default());
    };
    let mut trie = Trie::with_capacity(p.max_matches.min(hi - lo).saturating_mul(p.max_depth).min(1 << 16) + 1);
    let mut sampled = 0;
    if p.max_depth > 0 && p.max_nodes > 0 {
        // Three passes so the random reads of all occurrences are in flight together:
        // suffix-array entries, then the text and boundary bits they point at, then the trie.
        for i in even_sample(lo, hi, p.max_matches) {
            c.suffixes.prefetch(i);
        }
        let last_matched: Vec<u64> = even_sample(lo, hi, p.max_matches)
            .map(|i| c.suffix(i).map(|pos| pos + match_len as u64 - 1))
            .collect::<Result<_>>()?;
        for &q in &last_matched {
            c.prefetch_occurrence(q);
        }
        for &q in &last_matched {
            trie.insert(continuation(c, q, p.max_depth));
        }
        sampled = last_matched.len();
    }
    let mut tree = trie.top_subtree(p.max_nodes);
    tree.match_len = match_len;
    tree.match_count = (hi - lo) as u64;
    tree.sampled = sampled;
    Ok(tree)
}
