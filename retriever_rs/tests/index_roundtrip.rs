//! Build real index files and check them against naive references: the suffix array against a
//! plain sort, the search against brute-force enumeration, with document boundaries and every
//! storage width.

use proptest::prelude::*;
use retriever_rs::search::even_sample;
use retriever_rs::{DraftTree, Index, IndexError, IndexWriter, SearchParams, WriterOptions};
use std::cmp::Reverse;
use std::collections::HashMap;
use std::path::Path;

fn build(docs: &[Vec<u32>], vocab: u32, force_wide: bool, path: &Path) -> Index {
    let mut w = IndexWriter::new(vocab, "test-fp", WriterOptions { threads: 1, force_wide }).unwrap();
    for d in docs {
        w.add_document(d).unwrap();
    }
    w.finalize(path).unwrap();
    Index::open(path).unwrap()
}

/// The separator text the suffix array is defined over: token + 1, 0 after each document.
fn separator_text(docs: &[Vec<u32>]) -> (Vec<u64>, Vec<Option<(usize, usize)>>) {
    let mut text = Vec::new();
    let mut origin = Vec::new();
    for (di, d) in docs.iter().enumerate().filter(|(_, d)| !d.is_empty()) {
        for (off, &t) in d.iter().enumerate() {
            text.push(t as u64 + 1);
            origin.push(Some((di, off)));
        }
        text.push(0);
        origin.push(None);
    }
    (text, origin)
}

/// Suffix array by naive sorting, in positions of the separator-free token stream.
fn naive_sa(docs: &[Vec<u32>]) -> Vec<u64> {
    let (text, origin) = separator_text(docs);
    let mut flat_pos = Vec::new();
    let mut next = 0u64;
    for o in &origin {
        flat_pos.push(o.map(|_| {
            next += 1;
            next - 1
        }));
    }
    let mut order: Vec<usize> = (0..text.len()).collect();
    order.sort_by(|&a, &b| text[a..].cmp(&text[b..]));
    order.into_iter().filter_map(|p| flat_pos[p]).collect()
}

struct SaOf;
impl retriever_rs::index::CorpusFn<Vec<u64>> for SaOf {
    fn call<T: retriever_rs::index::Symbols + ?Sized, S: retriever_rs::index::Positions + ?Sized>(
        self,
        c: &retriever_rs::index::Corpus<T, S>,
    ) -> Vec<u64> {
        (0..c.suffixes.len()).map(|i| c.suffixes.at(i)).collect()
    }
}

/// Brute force: scan every document for every suffix length, order the occurrences like the
/// suffix array would, count continuations by prefix, select greedily.
fn brute_search(docs: &[Vec<u32>], context: &[u32], p: &SearchParams) -> DraftTree {
    let (text, origin) = separator_text(docs);
    let longest = p.max_suffix.min(context.len());
    let mut found = None;
    for len in (p.min_suffix..=longest).rev() {
        let pat = &context[context.len() - len..];
        let mut occ: Vec<usize> = (0..text.len())
            .filter(|&q| origin[q].is_some_and(|(di, off)| docs[di][off..].starts_with(pat)))
            .collect();
        if !occ.is_empty() {
            occ.sort_by(|&a, &b| text[a..].cmp(&text[b..]));
            found = Some((len, occ));
            break;
        }
    }
    let Some((len, occ)) = found else { return DraftTree::default() };
    let mut counts: HashMap<Vec<u32>, u32> = HashMap::new();
    let mut sampled = 0;
    for i in even_sample(0, occ.len(), p.max_matches) {
        let (di, off) = origin[occ[i]].unwrap();
        let d = &docs[di];
        let cont = &d[off + len..d.len().min(off + len + p.max_depth)];
        for k in 1..=cont.len() {
            *counts.entry(cont[..k].to_vec()).or_default() += 1;
        }
        sampled += 1;
    }
    // Greedy selection with the documented tie-breaks.
    let mut rank: HashMap<Vec<u32>, usize> = HashMap::new();
    let mut chosen: Vec<Vec<u32>> = Vec::new();
    while chosen.len() < p.max_nodes {
        let best = counts
            .iter()
            .filter(|(path, _)| !rank.contains_key(*path))
            .filter_map(|(path, &c)| {
                let parent = &path[..path.len() - 1];
                let pr = if parent.is_empty() { Some(0) } else { rank.get(parent).copied() }?;
                Some(((c, Reverse(path.len()), Reverse(pr), Reverse(*path.last().unwrap())), path.clone()))
            })
            .max();
        let Some((_, path)) = best else { break };
        chosen.push(path.clone());
        rank.insert(path, chosen.len());
    }
    // BFS layout: by depth, then parent's output index, support desc, token asc.
    let mut out = DraftTree::default();
    let mut index_of: HashMap<Vec<u32>, usize> = HashMap::new();
    let max_d = chosen.iter().map(|c| c.len()).max().unwrap_or(0);
    for d in 1..=max_d {
        let mut level: Vec<&Vec<u32>> = chosen.iter().filter(|c| c.len() == d).collect();
        let parent_idx = |c: &Vec<u32>| if d == 1 { 0 } else { index_of[&c[..d - 1]] + 1 };
        level.sort_by_key(|c| (parent_idx(c), Reverse(counts[*c]), c[d - 1]));
        for c in level {
            out.tokens.push(c[d - 1]);
            out.parents.push(if d == 1 { -1 } else { index_of[&c[..d - 1]] as i32 });
            out.depth.push(d as u32);
            out.support.push(counts[c]);
            index_of.insert(c.clone(), out.tokens.len() - 1);
        }
    }
    out.match_len = len;
    out.match_count = occ.len() as u64;
    out.sampled = sampled;
    out
}

fn corpus(alphabet: u32) -> impl Strategy<Value = Vec<Vec<u32>>> {
    prop::collection::vec(prop::collection::vec(0..alphabet, 0..40), 0..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]

    #[test]
    fn suffix_array_equals_naive_sort_u16(docs in corpus(5), wide in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let idx = build(&docs, 1000, wide, &dir.path().join("i.dsi"));
        prop_assert_eq!(idx.header().token_width, 2);
        prop_assert_eq!(idx.header().sa_width, if wide { 8 } else { 4 });
        prop_assert_eq!(idx.with_corpus(SaOf), naive_sa(&docs));
        idx.verify().unwrap();
    }

    #[test]
    fn suffix_array_equals_naive_sort_u32(docs in prop::collection::vec(prop::collection::vec(prop_oneof![0u32..4, 262_140u32..262_144], 0..40), 0..8)) {
        let dir = tempfile::tempdir().unwrap();
        let idx = build(&docs, 262_144, false, &dir.path().join("i.dsi"));
        prop_assert_eq!(idx.header().token_width, 4);
        prop_assert_eq!(idx.with_corpus(SaOf), naive_sa(&docs));
        // Tokens past u16 survive untruncated.
        for (i, d) in docs.iter().filter(|d| !d.is_empty()).enumerate() {
            prop_assert_eq!(&idx.document(i as u64).unwrap(), d);
        }
    }

    #[test]
    fn search_equals_brute_force(
        docs in corpus(4),
        context in prop::collection::vec(0u32..4, 0..12),
        max_nodes in 1usize..20,
        max_depth in 1usize..8,
        max_matches in 1usize..12,
        min_suffix in 1usize..3,
        extra in 0usize..6,
        wide in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let idx = build(&docs, 4, wide, &dir.path().join("i.dsi"));
        let p = SearchParams { max_nodes, max_depth, max_matches, min_suffix, max_suffix: min_suffix + extra };
        let got = idx.search(&context, &p).unwrap();
        let want = brute_search(&docs, &context, &p);
        prop_assert_eq!(got, want);
    }
}

#[test]
fn no_match_or_continuation_crosses_a_document_boundary() {
    let dir = tempfile::tempdir().unwrap();
    // "7 8" ends document 0; document 1 starts with "9". Across the boundary "8 9" would match.
    let idx = build(&[vec![1, 7, 8], vec![9, 9, 9]], 100, false, &dir.path().join("i.dsi"));
    let p = SearchParams { min_suffix: 2, ..Default::default() };
    assert!(idx.search(&[8, 9], &p).unwrap().is_empty(), "match across documents");
    let t = idx.search(&[7, 8], &p).unwrap();
    assert_eq!(t.match_len, 2);
    assert!(t.is_empty(), "continuation ran into the next document: {t:?}");
}

#[test]
fn seed_example_of_rest() {
    let dir = tempfile::tempdir().unwrap();
    let idx = build(&[vec![1, 2, 3, 4], vec![1, 2, 3, 4], vec![2, 3, 5, 6]], 10, false, &dir.path().join("i.dsi"));
    let t = idx.search(&[2, 3], &SearchParams { max_nodes: 2, ..Default::default() }).unwrap();
    assert_eq!(t.tokens, vec![4, 5]);
    assert_eq!(t.parents, vec![-1, -1]);
    assert_eq!(t.support, vec![2, 1]);
    assert_eq!(t.match_count, 3);
}

#[test]
fn even_sample_spreads_over_the_range() {
    let got: Vec<usize> = even_sample(100, 200, 4).collect();
    assert_eq!(got, vec![100, 125, 150, 175]);
    assert_eq!(even_sample(5, 7, 10).collect::<Vec<_>>(), vec![5, 6]);
}

#[test]
fn empty_datastore_is_valid_and_searches_empty() {
    let dir = tempfile::tempdir().unwrap();
    let idx = build(&[], 32_000, false, &dir.path().join("i.dsi"));
    assert_eq!(idx.header().token_count, 0);
    assert!(idx.search(&[1, 2, 3], &SearchParams::default()).unwrap().is_empty());
    idx.verify().unwrap();
}

#[test]
fn out_of_range_token_names_entry_and_position() {
    let mut w = IndexWriter::new(50, "", WriterOptions::default()).unwrap();
    w.add_document(&[1u32, 2]).unwrap();
    let err = w.add_document(&[3i64, 4, 50]).unwrap_err();
    assert!(matches!(err, IndexError::TokenOutOfRange { entry: 1, position: 2, value: 50, .. }), "{err}");
    let err = w.add_document(&[-1i64]).unwrap_err();
    assert!(matches!(err, IndexError::TokenOutOfRange { entry: 2, position: 0, value: -1, .. }));
    assert_eq!(w.tokens(), 2, "a rejected entry adds nothing");
}

#[test]
fn cancelled_build_leaves_previous_index_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.dsi");
    build(&[vec![1, 2, 3]], 10, false, &path);
    let before = std::fs::read(&path).unwrap();
    let mut w = IndexWriter::new(10, "", WriterOptions::default()).unwrap();
    w.add_document(&[4u32, 5, 6]).unwrap();
    w.cancel_handle().store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(w.finalize(&path), Err(IndexError::Cancelled)));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "temp files left behind: {leftovers:?}");
}

#[test]
fn corrupt_body_is_caught_by_verify_and_never_crashes_search() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.dsi");
    let docs: Vec<Vec<u32>> = (0..20).map(|i| (0..50).map(|j| (i * 7 + j * 3) % 11).collect()).collect();
    build(&docs, 11, false, &path);
    let good = std::fs::read(&path).unwrap();
    for at in (256..good.len()).step_by(7) {
        let mut bad = good.clone();
        bad[at] ^= 0xff;
        std::fs::write(&path, &bad).unwrap();
        let idx = Index::open(&path).unwrap();
        assert!(idx.verify().is_err());
        // Wrong answers or a CorruptData error are fine; a panic or hang is not.
        let _ = idx.search(&[1, 4, 7], &SearchParams::default());
    }
}
