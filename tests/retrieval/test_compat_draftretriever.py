"""The DraftRetriever-compatible face: REST's API, shapes and meaning."""

import numpy as np
import pytest

import draftscope.retrieval.draftretriever as draftretriever


def _store(tmp_path, entries, vocab_size=100):
    path = str(tmp_path / "rest.idx")
    writer = draftretriever.Writer(index_file_path=path, vocab_size=vocab_size)
    for e in entries:
        writer.add_entry(e)
    writer.finalize()
    return draftretriever.Reader(index_file_path=path)


def test_seed_example(tmp_path):
    reader = _store(tmp_path, [[1, 2, 3, 4], [1, 2, 3, 4], [2, 3, 5, 6]])
    retrieved, mask, tree_indices, position_ids, retrieve_indices = reader.search([2, 3], choices=2)
    assert retrieved == [[4], [5]]
    assert mask == [[1, 0, 0], [1, 1, 0], [1, 0, 1]]
    assert tree_indices == [0, 1, 2]
    assert position_ids == [0, 1, 1]
    assert retrieve_indices == [[0, 1], [0, 2]]


def test_no_match_gives_empty_lists(tmp_path):
    reader = _store(tmp_path, [[1, 2, 3]])
    assert reader.search([7, 8], choices=8) == ([], [], [], [], [])


def _rest_tree_candidates(retrieved, tree_indices, root_token):
    """What REST's generate_candidates_and_draft_buffer does with the outputs."""
    columns = [list(col) for col in zip(*retrieved)]
    columns = [[x for i, x in enumerate(col) if col.index(x) == i and x != -2] for col in columns]
    topk = max(len(c) for c in columns)
    columns = [c + [0] * (topk - len(c)) for c in columns]
    candidates = np.array([root_token] + [x for c in columns for x in c])
    return candidates[np.array(tree_indices)]


@pytest.mark.parametrize("seed", range(5))
def test_buffers_mean_what_rest_expects(tmp_path, seed):
    rng = np.random.default_rng(seed)
    entries = [rng.integers(0, 5, size=rng.integers(4, 40)).tolist() for _ in range(60)]
    reader = _store(tmp_path, entries, vocab_size=5)
    for _ in range(10):
        query = rng.integers(0, 5, size=2).tolist()
        retrieved, mask, tree_indices, position_ids, retrieve_indices = reader.search(query, choices=24, long=6)
        if not retrieved:
            continue
        n = len(retrieved)
        assert n <= 24
        assert np.array(mask).shape == (n + 1, n + 1)
        assert len(tree_indices) == len(position_ids) == n + 1
        # Each node's token, as REST's caller reconstructs it from the candidates.
        tree_candidates = _rest_tree_candidates(retrieved, tree_indices, root_token=99)
        assert tree_candidates[0] == 99
        for i, row in enumerate(retrieved):
            path = [t for t in row if t != -2]
            assert tree_candidates[i + 1] == path[-1]
            assert position_ids[i + 1] == len(path)
            # The node attends to the root, itself and exactly its ancestors (shorter prefixes).
            ancestors = {
                j + 1
                for j, other in enumerate(retrieved)
                if [t for t in other if t != -2] == path[: len([t for t in other if t != -2])]
            }
            assert {j for j, v in enumerate(mask[i + 1]) if v} == {0} | ancestors
        # Every leaf path of retrieve_indices spells a retrieved path, padded with -1.
        width = max(len([t for t in r if t != -2]) for r in retrieved) + 1
        for row in retrieve_indices:
            assert len(row) == width and row[0] == 0
            nodes = [x for x in row[1:] if x != -1]
            assert row[1 + len(nodes) :] == [-1] * (width - 1 - len(nodes))
            tokens = [tree_candidates[x] for x in nodes]
            assert tokens == [t for t in retrieved[nodes[-1] - 1] if t != -2]


def test_large_ids_survive_the_compat_face(tmp_path):
    reader = _store(tmp_path, [[151_000, 151_001, 151_002]], vocab_size=151_936)
    assert reader.search([151_000, 151_001])[0] == [[151_002]]


def reference_buffers(tree):
    """REST's five buffers computed in Python from a Reader's DraftTree: the oracle the Rust
    builder (retriever_rs::rest) is held to."""
    n = len(tree)
    if n == 0:
        return [], [], [], [], []
    paths = [tree.path(i) for i in range(n)]
    depth = tree.max_depth
    rows = [[int(tree.tokens[j]) for j in p] + [-2] * (depth - len(p)) for p in paths]
    slots = [{} for _ in range(depth)]
    for row in rows:
        for d, token in enumerate(row):
            if token != -2:
                slots[d].setdefault(token, len(slots[d]))
    topk = max(len(c) for c in slots)
    mask = np.zeros((n + 1, n + 1), dtype=np.int64)
    mask[:, 0] = 1
    mask[1:, 1:] = tree.ancestor_mask()
    tree_indices = [0] + [
        slots[int(tree.depth[i]) - 1][int(tree.tokens[i])] + topk * (int(tree.depth[i]) - 1) + 1 for i in range(n)
    ]
    positions = [0] + [int(d) for d in tree.depth]
    retrieve = [[0] + [j + 1 for j in paths[leaf]] for leaf in tree.leaves()]
    retrieve = [r + [-1] * (depth + 1 - len(r)) for r in retrieve]
    return rows, mask.tolist(), tree_indices, positions, retrieve


@pytest.mark.parametrize("seed", range(4))
def test_buffers_equal_the_python_reference_for_the_same_tree(tmp_path, seed):
    from draftscope.retrieval import Reader as TreeReader

    rng = np.random.default_rng(seed)
    entries = [rng.integers(0, 6, size=rng.integers(4, 60)).tolist() for _ in range(80)]
    reader = _store(tmp_path, entries, vocab_size=6)
    trees = TreeReader(tmp_path / "rest.idx")
    compared = 0
    for _ in range(30):
        span = int(rng.integers(1, 4))
        query = rng.integers(0, 6, size=span).tolist()
        choices, long = int(rng.integers(1, 40)), int(rng.integers(1, 8))
        got = reader.search(query, choices=choices, long=long)
        tree = trees.search(
            query, max_nodes=choices, max_depth=long, max_matches=5000, min_suffix=span, max_suffix=span
        )
        assert got == reference_buffers(tree)
        compared += len(tree) > 0
    assert compared > 10


def test_tokens_outside_the_vocabulary_match_nothing_as_in_rest(tmp_path):
    reader = _store(tmp_path, [[1, 2, 3, 4]], vocab_size=10)
    assert reader.search([2, 3])[0] == [[4]]
    for pattern in ([2, 10], [10**6, 3], [-1, 2], []):
        assert reader.search(pattern) == ([], [], [], [], []), pattern


def test_rest_keyword_names_and_bad_knobs(tmp_path):
    reader = _store(tmp_path, [[1, 2, 3, 4], [1, 2, 5]], vocab_size=10)
    assert reader.search(py_substring=[1, 2], k=10, choices=1, long=1)[0] == [[3]]
    with pytest.raises(ValueError, match="choices must be >= 0"):
        reader.search([1, 2], choices=-1)
    with pytest.raises(ValueError, match="max_nodes must be <="):
        reader.search([1, 2], choices=2**40)
    with pytest.raises(ValueError, match="max_matches must be <="):
        reader.search([1, 2], k=2**40)
    with pytest.raises(OverflowError, match="'k'"):
        reader.search([1, 2], k=2**63)


def test_dump_data_exists_and_changes_nothing(tmp_path):
    path = str(tmp_path / "rest.idx")
    writer = draftretriever.Writer(index_file_path=path, vocab_size=10)
    writer.add_entry([1, 2, 3])
    writer.dump_data()
    writer.add_entry([3, 4, 5])
    writer.dump_data()
    writer.finalize()
    reader = draftretriever.Reader(index_file_path=path)
    assert reader.search([2, 3]) == ([], [], [], [], [])  # each entry its own document: nothing follows 3
    assert reader.search([3, 4])[0] == [[5]]
    with pytest.raises(ValueError, match="after finalize"):
        writer.dump_data()
