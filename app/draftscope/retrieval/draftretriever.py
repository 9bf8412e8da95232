"""A DraftRetriever-compatible face, so REST code switches by changing one import::

    import draftscope.retrieval.draftretriever as draftretriever

    writer = draftretriever.Writer(index_file_path="chat.idx", vocab_size=32000)
    writer.add_entry(token_ids)
    writer.finalize()
    datastore = draftretriever.Reader(index_file_path="chat.idx")
    retrieved_token_list, draft_attn_mask, tree_indices, draft_position_ids, retrieve_indices = \
        datastore.search(this_token, choices=64)

Differences from REST that REST code does not notice: every ``add_entry`` is its own document
(no match or continuation runs from one into the next), token ids are not truncated to 16 bits,
and matches are an even sample of all occurrences rather than the first ``k`` in suffix order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from draftscope.draft_tree import DraftTree
from draftscope.retrieval.index import Reader as _Reader
from draftscope.retrieval.index import Writer as _Writer

#: REST pads token paths with -2 and retrieve indices with -1 (-2 + 1).
TOKEN_PAD = -2
INDEX_PAD = -1


class Writer:
    def __init__(self, index_file_path: str, max_chunk_len: int | None = None, vocab_size: int | None = None) -> None:
        # max_chunk_len only sized REST's in-memory chunks; one suffix array covers everything here.
        del max_chunk_len
        self._writer = _Writer(index_file_path, 35000 if vocab_size is None else vocab_size)
        self._finalized = False

    def add_entry(self, py_text: Sequence[int]) -> None:
        self._writer.add_entry(py_text)

    def finalize(self) -> None:
        if not self._finalized:
            self._finalized = True
            self._writer.finalize()


class Reader:
    def __init__(self, index_file_path: str) -> None:
        self._reader = _Reader(index_file_path)

    def search(
        self,
        py_substring: Sequence[int],
        k: int | None = None,
        choices: int | None = None,
        long: int | None = None,
    ) -> tuple[list[list[int]], list[list[int]], list[int], list[int], list[list[int]]]:
        """Continuations of exactly ``py_substring`` (REST's callers try several spans
        themselves): up to ``k`` matches, ``choices`` tree nodes, ``long`` tokens deep."""
        pattern = list(py_substring)
        if not pattern:
            return [], [], [], [], []
        tree = self._reader.search(
            pattern,
            max_nodes=64 if choices is None else choices,
            max_depth=10 if long is None else long,
            max_matches=5000 if k is None else k,
            min_suffix=len(pattern),
            max_suffix=len(pattern),
        )
        return rest_buffers(tree)


def rest_buffers(tree: DraftTree) -> tuple[list[list[int]], list[list[int]], list[int], list[int], list[list[int]]]:
    """REST's five outputs for a draft tree (node order = the tree's BFS order, index 0 = root).

    - retrieved_token_list: one row per node, its token path padded with -2;
    - draft_attn_mask: [n+1, n+1], 1 where a node may attend (root, ancestors, itself);
    - tree_indices: [n+1], where each node's token sits in ``[root] + per-depth unique tokens``
      (each depth padded to the widest one), as REST's caller builds that candidate list;
    - draft_position_ids: [n+1], the depth of each node (0 for the root);
    - retrieve_indices: one row per leaf, [0, node+1 along the path], padded with -1.
    """
    n = len(tree)
    if n == 0:
        return [], [], [], [], []
    paths = [tree.path(i) for i in range(n)]
    max_depth = tree.max_depth
    token_rows = [[int(tree.tokens[j]) for j in p] + [TOKEN_PAD] * (max_depth - len(p)) for p in paths]

    # Per-depth unique tokens in order of first appearance down each column, as REST's caller
    # computes them from retrieved_token_list.
    column_slot: list[dict[int, int]] = [{} for _ in range(max_depth)]
    for row in token_rows:
        for d, token in enumerate(row):
            if token != TOKEN_PAD:
                column_slot[d].setdefault(token, len(column_slot[d]))
    topk = max(len(c) for c in column_slot)

    mask = np.zeros((n + 1, n + 1), dtype=np.int64)
    mask[:, 0] = 1
    mask[1:, 1:] = tree.ancestor_mask()
    mask[0, 0] = 1
    tree_indices = [0] + [
        column_slot[int(tree.depth[i]) - 1][int(tree.tokens[i])] + topk * (int(tree.depth[i]) - 1) + 1 for i in range(n)
    ]
    position_ids = [0] + [int(d) for d in tree.depth]
    retrieve = [[0] + [j + 1 for j in paths[leaf]] for leaf in tree.leaves()]
    retrieve = [r + [INDEX_PAD] * (max_depth + 1 - len(r)) for r in retrieve]
    return token_rows, mask.tolist(), tree_indices, position_ids, retrieve
