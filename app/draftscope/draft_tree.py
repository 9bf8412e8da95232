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
