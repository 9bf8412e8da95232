"""The one structure every drafter returns: a flat draft tree.

Nodes are in BFS (topological) order; the root is the last accepted token and is implicit.
``parents[i] == -1`` means node ``i`` hangs off the root. Everything is plain numpy so the tree
can travel in events and across threads without touching torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


class DraftSource(IntEnum):
    """Who proposed a token (the target itself emits the token after the accepted drafts)."""

    TARGET = 0
    RETRIEVAL = 1
    CONTEXT = 2
    MODEL = 3
    RECURRENT = 4
    ORACLE = 5  # benchmark only: drafts are the known answer (the ceiling of speculation)
    LEARNED = 6  # the model's own past answers (datastore.learned)
    GRAMMAR = 7  # the tokens an answer's grammar forces next (engine/grammar.py: not a drafter one switches)


@dataclass(frozen=True, eq=False)
class DraftTree:
    tokens: np.ndarray  # int64 [n]
    parents: np.ndarray  # int32 [n], -1 = child of the root
    depth: np.ndarray  # int32 [n], 1-based
    support: np.ndarray  # float32 [n], count (retrieval) or probability (model)
    source: np.ndarray  # int8 [n], DraftSource
    match_len: int = 0  # retrieval: length of the context suffix that matched
    match_count: int = 0  # retrieval: occurrences of that suffix in the datastore
    extra: dict = field(default_factory=dict)

    @classmethod
    def empty(cls) -> DraftTree:
        return cls(
            tokens=np.zeros(0, np.int64),
            parents=np.zeros(0, np.int32),
            depth=np.zeros(0, np.int32),
            support=np.zeros(0, np.float32),
            source=np.zeros(0, np.int8),
        )

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __repr__(self) -> str:
        return f"DraftTree(nodes={len(self)}, max_depth={self.max_depth}, match_len={self.match_len})"

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if len(self) else 0

    def validate(self) -> None:
        """Raise ValueError unless the arrays describe a well-formed BFS-ordered tree."""
        n = len(self)
        for name in ("parents", "depth", "support", "source"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"draft tree: {name} has shape {getattr(self, name).shape}, expected ({n},)")
        for i in range(n):
            p = int(self.parents[i])
            if not -1 <= p < i:
                raise ValueError(f"draft tree: node {i} has parent {p}, must be -1 or an earlier node")
            want = 1 if p == -1 else int(self.depth[p]) + 1
            if int(self.depth[i]) != want:
                raise ValueError(f"draft tree: node {i} has depth {int(self.depth[i])}, expected {want}")
            if i and int(self.depth[i]) < int(self.depth[i - 1]):
                raise ValueError("draft tree: nodes are not in BFS order")

    def path(self, i: int) -> list[int]:
        """Node indices from the first level down to node ``i``."""
        out = []
        while i != -1:
            out.append(i)
            i = int(self.parents[i])
        return out[::-1]

    def token_path(self, i: int) -> list[int]:
        return [int(self.tokens[j]) for j in self.path(i)]

    def leaves(self) -> np.ndarray:
        """Indices of nodes with no children, in node order."""
        has_child = np.zeros(len(self), dtype=bool)
        parents = self.parents[self.parents >= 0]
        has_child[parents] = True
        return np.flatnonzero(~has_child)

    def ancestor_mask(self) -> np.ndarray:
        """bool [n, n]: node i may attend to node j iff j is i or an ancestor of i."""
        n = len(self)
        mask = np.eye(n, dtype=bool)
        for i in range(n):
            p = int(self.parents[i])
            if p >= 0:
                mask[i] |= mask[p]
        return mask


# ---------------------------------------------------------------------- trees made and cut
# Every operation that makes a tree or cuts one to what a step may hold lives here, beside the
# structure: the answer plans each step with the cuts (engine/answer.py), the step policy trims with
# ``subtree``, cost measurements and the draft model verify chains.


def chain_tree(tokens, source: int = 1) -> DraftTree:
    """A draft chain (each node the child of the one before): what cost measurements verify and
    the oracle drafts (``source``: the DraftSource its nodes carry)."""
    n = len(tokens)
    return DraftTree(
        np.asarray(tokens, dtype=np.int64),
        np.arange(-1, n - 1, dtype=np.int32),
        np.arange(1, n + 1, dtype=np.int32),
        np.ones(n, np.float32),
        np.full(n, source, np.int8),
    )


def tree_from_parents(tokens, parents, source: int = 1) -> DraftTree:
    """A tree from its tokens and each node's parent (-1: the root), parents before children; the
    depths follow. Support 1 each: what a fixed check tree needs (the capture check's)."""
    depth: list[int] = []
    for parent in parents:
        depth.append(1 if parent < 0 else depth[parent] + 1)
    n = len(depth)
    return DraftTree(
        np.asarray(tokens, dtype=np.int64).reshape(n),
        np.asarray(parents, dtype=np.int32).reshape(n),
        np.asarray(depth, dtype=np.int32).reshape(n),
        np.ones(n, np.float32),
        np.full(n, source, np.int8),
    )


def children_lists(tree: DraftTree) -> dict[int, list[int]]:
    """Each node's children in node order, the root's under -1 (a node without children: no key)."""
    kids: dict[int, list[int]] = {-1: []}
    for i, p in enumerate(tree.parents.tolist()):
        kids.setdefault(int(p), []).append(i)
    return kids


def leaves_below(tree: DraftTree) -> list[tuple[int, ...]]:
    """For each node, the leaves below it (leaf k in node order is k): llama.cpp gives each leaf a
    sequence id, and a node joins the sequences of its leaves (its first is the one it is masked by)."""
    below: list[list[int]] = [[] for _ in range(len(tree))]
    for k, leaf in enumerate(tree.leaves()):
        node = int(leaf)
        while node != -1:
            below[node].append(k)
            node = int(tree.parents[node])
    return [tuple(s) for s in below]


def subtree(tree: DraftTree, keep: np.ndarray) -> DraftTree:
    """The nodes where ``keep`` is True (their ancestors must be kept too), in the same order."""
    index = np.flatnonzero(keep)
    if index.size == len(tree):
        return tree
    if index.size == 0:
        return DraftTree.empty()
    remap = {int(old): new for new, old in enumerate(index)}
    parents = np.array([remap[int(tree.parents[i])] if tree.parents[i] >= 0 else -1 for i in index], dtype=np.int32)
    return DraftTree(
        tree.tokens[index],
        parents,
        tree.depth[index],
        tree.support[index],
        tree.source[index],
        match_len=tree.match_len,
        match_count=tree.match_count,
        extra=dict(tree.extra),
    )


def drop_foreign_tokens(tree: DraftTree, vocab: int) -> DraftTree:
    """Drafts whose token is not in the model's vocabulary (a datastore built for another
    tokenizer, a damaged index) are dropped with everything below them: they could never be
    accepted, and the model cannot even embed them."""
    if len(tree) == 0:
        return tree
    bad = (tree.tokens < 0) | (tree.tokens >= vocab)
    if not bad.any():
        return tree
    keep = ~bad
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        if parent >= 0 and not keep[parent]:
            keep[i] = False
    return subtree(tree, keep)


def prune_depth(tree: DraftTree, max_depth: int) -> DraftTree:
    """Drop nodes deeper than ``max_depth`` (they could only produce tokens past the limit)."""
    if len(tree) == 0 or tree.max_depth <= max_depth:
        return tree
    return subtree(tree, tree.depth <= max_depth)


def first_nodes(tree: DraftTree, most: int) -> DraftTree:
    """The tree's first ``most`` nodes (parents come before children, so it stays a tree)."""
    if len(tree) <= most:
        return tree
    return subtree(tree, np.arange(len(tree)) < most)


def limit_leaves(tree: DraftTree, max_leaves: int | None) -> DraftTree:
    """At most ``max_leaves`` leaves (a backend shared by several answers gives each fewer cache
    sequences, one per leaf): nodes are kept in the tree's order, parents first, while they do not
    add a leaf past the limit."""
    if max_leaves is None or len(tree) == 0 or len(tree.leaves()) <= max_leaves:
        return tree
    keep = np.zeros(len(tree), dtype=bool)
    is_leaf = np.zeros(len(tree), dtype=bool)
    leaves = 0
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        if parent >= 0 and not keep[parent]:
            continue
        extends = parent >= 0 and is_leaf[parent]  # the parent stops being a leaf: the count holds
        if not extends and leaves >= max_leaves:
            continue
        keep[i], is_leaf[i] = True, True
        if extends:
            is_leaf[parent] = False
        else:
            leaves += 1
    return subtree(tree, keep)
