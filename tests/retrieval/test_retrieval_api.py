"""The Python API of the retriever: writing, reading and searching real index files."""

import array
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from draftscope.retrieval import BuildCancelled, DraftSource, Reader, Writer


def test_every_int_sequence_kind_round_trips(tmp_path):
    docs = [
        [1, 2, 3],
        np.array([4, 5, 6], dtype=np.int64),
        np.array([7, 8], dtype=np.uint16),
        np.array([9, 10], dtype=np.int32),
        array.array("I", [11, 12, 13]),
        range(20, 25),
        (x for x in [30, 31]),
        (40, np.int64(41)),
    ]
    path = tmp_path / "kinds.idx"
    w = Writer(path, 100)
    w.add_entries(docs)
    stats = w.finalize()
    assert stats["documents"] == len(docs)
    assert stats["tokens"] == 3 + 3 + 2 + 2 + 3 + 5 + 2 + 2
    r = Reader(path)
    expected = [[1, 2, 3], [4, 5, 6], [7, 8], [9, 10], [11, 12, 13], [20, 21, 22, 23, 24], [30, 31], [40, 41]]
    assert [r.document(i).tolist() for i in range(r.document_count)] == expected


def test_large_vocabularies_are_stored_without_truncation(build_index):
    # Gemma-3 has 262,144 tokens; REST would truncate these ids to 16 bits.
    big = [[262_143, 70_000, 5, 262_143, 70_000, 9], [1, 262_143, 70_000, 5]]
    r = build_index(big, vocab_size=262_144)
    assert r.token_width == 4
    assert r.document(0).tolist() == big[0]
    tree = r.search([262_143, 70_000])
    first = tree.depth == 1
    assert tree.tokens[first].tolist() == [5, 9]
    assert tree.support[first].tolist() == [2, 1]
    assert tree.token_path(len(tree) - 1) == [5, 262_143, 70_000, 9]


def test_u16_covers_exactly_65536_tokens(build_index):
    r = build_index([[65_535, 0, 65_535, 1]], vocab_size=65_536)
    assert r.token_width == 2
    assert r.document(0).tolist() == [65_535, 0, 65_535, 1]
    assert r.search([0, 65_535]).tokens.tolist() == [1]


def test_longest_suffix_wins(build_index):
    r = build_index([[1, 2, 3, 7, 7], [9, 2, 3, 8, 8], [9, 2, 3, 8, 6]])
    tree = r.search([5, 1, 2, 3])
    assert tree.match_len == 3
    assert tree.token_path(len(tree) - 1)[0] == 7
    assert set(tree.tokens[tree.depth == 1].tolist()) == {7}
    shorter = r.search([5, 5, 2, 3])
    assert shorter.match_len == 2
    assert set(shorter.tokens[shorter.depth == 1].tolist()) == {7, 8}


def test_tree_is_connected_bfs_and_supports_shrink_down_the_tree(build_index):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 6, size=rng.integers(5, 60)) for _ in range(40)]
    r = build_index(docs, vocab_size=6)
    for _ in range(50):
        ctx = rng.integers(0, 6, size=5)
        tree = r.search(ctx, max_nodes=20, max_depth=6)
        tree.validate()
        assert len(tree) <= 20
        assert (tree.source == DraftSource.RETRIEVAL).all()
        for i in range(len(tree)):
            p = tree.parents[i]
            parent_support = tree.extra["sampled"] if p < 0 else tree.support[p]
            assert tree.support[i] <= parent_support
            # Siblings are distinct tokens.
        for p in set(tree.parents.tolist()):
            kids = tree.tokens[tree.parents == p]
            assert len(set(kids.tolist())) == len(kids)


def test_matches_are_an_even_sample_not_the_first_in_suffix_order(build_index):
    # 1,000 occurrences of [1, 2], followed by 100 distinct tokens (10 each); sorted order
    # would put all the smallest continuations first.
    docs = [[1, 2, 10 + (i % 100)] for i in range(1000)]
    r = build_index(docs, vocab_size=200)
    tree = r.search([1, 2], max_matches=10, max_nodes=64)
    assert tree.match_count == 1000
    assert tree.extra["sampled"] == 10
    firsts = sorted(tree.tokens.tolist())
    assert len(firsts) == 10
    assert firsts[-1] - firsts[0] >= 80, f"sample bunched at one end: {firsts}"
    assert r.search([1, 2], max_matches=10).tokens.tolist() == tree.tokens.tolist(), "deterministic"


def test_no_match_crosses_document_boundaries(build_index):
    r = build_index([[1, 2, 3], [4, 5, 6]])
    assert len(r.search([3, 4])) == 0
    tail = r.search([2, 3])
    assert tail.match_len == 2 and len(tail) == 0


def test_search_limits(build_index):
    r = build_index([list(range(50))] * 3)
    tree = r.search([0, 1], max_depth=5, max_nodes=100)
    assert tree.tokens.tolist() == [2, 3, 4, 5, 6]
    assert r.search([0, 1], max_depth=5, max_nodes=3).tokens.tolist() == [2, 3, 4]
    assert len(r.search([7])) == 0, "shorter than min_suffix"
    assert r.search([7], min_suffix=1).tokens[0] == 8
    with pytest.raises(ValueError, match="max_suffix must be >= min_suffix"):
        r.search([1, 2], min_suffix=4, max_suffix=3)
    with pytest.raises(ValueError, match="min_suffix must be at least 1"):
        r.search([1, 2], min_suffix=0)
    with pytest.raises(ValueError, match="max_nodes must be a non-negative int, got -1"):
        r.search([1, 2], max_nodes=-1)


def test_search_batch_equals_single_searches_and_threads_share_a_reader(build_index):
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 8, size=200) for _ in range(30)]
    r = build_index(docs, vocab_size=8)
    contexts = [rng.integers(0, 8, size=10) for _ in range(200)]
    single = [r.search(c) for c in contexts]
    batch = r.search_batch(contexts)
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(r.search, contexts))
    for a, b, c in zip(single, batch, threaded):
        assert a.tokens.tolist() == b.tokens.tolist() == c.tokens.tolist()
        assert a.parents.tolist() == b.parents.tolist() == c.parents.tolist()
        assert a.support.tolist() == b.support.tolist() == c.support.tolist()


def test_header_information(build_index):
    r = build_index([[1, 2], [3]], vocab_size=49_152, tokenizer_fingerprint="smollm2:abc123")
    info = r.info()
    assert info["documents"] == 2 and info["tokens"] == 3
    assert info["vocab_size"] == 49_152
    assert info["tokenizer_fingerprint"] == "smollm2:abc123"
    assert info["token_width"] == 2 and info["sa_width"] == 4
    assert info["file_bytes"] == r.path.stat().st_size
    r.verify()


def test_empty_datastore_is_valid(tmp_path):
    path = tmp_path / "empty.idx"
    stats = Writer(path, 32_000).finalize()
    assert stats["tokens"] == 0
    r = Reader(path)
    assert r.token_count == 0 and r.document_count == 0
    assert len(r.search([1, 2, 3])) == 0
    r.verify()


def test_cancel_leaves_previous_index_untouched(tmp_path, build_index):
    good = build_index([[1, 2, 3, 4]], name="store.idx")
    before = good.path.read_bytes()
    w = Writer(good.path, 100)
    w.add_entry([9, 9, 9])
    w.cancel()
    with pytest.raises(BuildCancelled):
        w.finalize()
    assert good.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.idx"], "temp file left behind"


def test_cancel_from_another_thread_during_a_big_build(tmp_path):
    path = tmp_path / "big.idx"
    path.write_bytes(b"previous contents")
    w = Writer(path, 50_000)
    rng = np.random.default_rng(2)
    for _ in range(40):
        w.add_entry(rng.integers(0, 50_000, size=100_000))
    outcome = {}

    def run():
        try:
            outcome["stats"] = w.finalize()
        except BuildCancelled as exc:
            outcome["cancelled"] = exc

    t = threading.Thread(target=run)
    t.start()
    w.cancel()
    t.join()
    assert "cancelled" in outcome
    assert path.read_bytes() == b"previous contents"
    assert [p.name for p in tmp_path.iterdir()] == ["big.idx"]


def test_cancel_while_the_suffix_array_is_being_sorted(tmp_path):
    """libsais cannot stop mid-sort: a cancel that lands during the sort is honoured as soon as it
    returns, before a byte of the index is written, and the previous index stays."""
    import time

    path = tmp_path / "big.idx"
    path.write_bytes(b"previous contents")
    w = Writer(path, 50_000, threads=1)
    rng = np.random.default_rng(3)
    for _ in range(100):
        w.add_entry(rng.integers(0, 50_000, size=200_000))  # 20M tokens: a sort of a second or two
    outcome = {}

    def run():
        t0 = time.perf_counter()
        try:
            outcome["stats"] = w.finalize()
        except BuildCancelled as exc:
            outcome["cancelled"] = exc
        outcome["seconds"] = time.perf_counter() - t0

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 60
    temp = []
    while not temp and time.monotonic() < deadline:  # the temp file appears, empty, as the sort starts
        temp = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        time.sleep(0.002)
    time.sleep(0.05)
    assert temp and temp[0].stat().st_size == 0, "still sorting: nothing written yet"
    w.cancel()
    t.join()
    assert "cancelled" in outcome, "the build finished although it was cancelled during the sort"
    assert path.read_bytes() == b"previous contents"
    assert [p.name for p in tmp_path.iterdir()] == ["big.idx"]


def test_exception_inside_with_block_writes_nothing(tmp_path):
    path = tmp_path / "x.idx"
    with pytest.raises(RuntimeError):
        with Writer(path, 10) as w:
            w.add_entry([1, 2, 3])
            raise RuntimeError("tokenizer crashed")
    assert not path.exists()
    with Writer(path, 10) as w:
        w.add_entry([1, 2, 3])
    assert Reader(path).token_count == 3


def test_finalize_twice_is_an_error(tmp_path):
    w = Writer(tmp_path / "x.idx", 10)
    w.add_entry([1])
    w.finalize()
    with pytest.raises(ValueError, match="already finalized"):
        w.finalize()
    with pytest.raises(ValueError, match="already finalized"):
        w.add_entry([1])
