"""A small frequency trie in Python, for drafters whose candidates are few (the live context,
merging trees): counts paths, then keeps the best-supported connected nodes in BFS order, with
the same tie-breaks as the Rust retriever."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import numpy as np

from draftscope.draft_tree import DraftTree


class PathTrie:
    def __init__(self) -> None:
        # node -> (token, parent, depth); node 0 is the root
        self.token = [0]
        self.parent = [-1]
        self.depth = [0]
        self.score = [0.0]
        self.source = [0]
        self.children: list[dict[int, int]] = [{}]

    def add(self, path: Iterable[int], weight: float = 1.0, source: int = 0, *, combine: str = "sum") -> list[int]:
        """Insert a path; returns its node ids. ``combine`` is how a node's score merges a new
        weight: "sum" (counts) or "max" (probabilities from several drafters)."""
        cur, ids = 0, []
        for tok in path:
            nxt = self.children[cur].get(tok)
            if nxt is None:
                nxt = len(self.token)
                self.token.append(tok)
                self.parent.append(cur)
                self.depth.append(self.depth[cur] + 1)
                self.score.append(0.0)
                self.source.append(source)
                self.children.append({})
                self.children[cur][tok] = nxt
            if combine == "sum":
                self.score[nxt] += weight
            elif weight > self.score[nxt]:
                self.score[nxt] = weight
                self.source[nxt] = source
            ids.append(nxt)
            cur = nxt
        return ids

    def select(self, budget: int) -> tuple[DraftTree, list[int]]:
        """Best-first connected top-``budget`` nodes in BFS order, and their trie node ids."""
        heap = [(-self.score[c], self.depth[c], 0, self.token[c], c) for c in self.children[0].values()]
        heapq.heapify(heap)
        rank = {0: 0}
        chosen = []
        while heap and len(chosen) < budget:
            *_, node = heapq.heappop(heap)
            chosen.append(node)
            rank[node] = len(chosen)
            for c in self.children[node].values():
                heapq.heappush(heap, (-self.score[c], self.depth[c], rank[node], self.token[c], c))
        # BFS layout: depth, then parent's output index, then score desc, token asc.
        out_index: dict[int, int] = {0: -1}
        order: list[int] = []
        for d in range(1, max((self.depth[c] for c in chosen), default=0) + 1):
            level = [c for c in chosen if self.depth[c] == d]
            level.sort(key=lambda c: (out_index[self.parent[c]], -self.score[c], self.token[c]))
            for c in level:
                out_index[c] = len(order)
                order.append(c)
        tree = DraftTree(
            tokens=np.array([self.token[c] for c in order], dtype=np.int64),
            parents=np.array([out_index[self.parent[c]] for c in order], dtype=np.int32),
            depth=np.array([self.depth[c] for c in order], dtype=np.int32),
            support=np.array([self.score[c] for c in order], dtype=np.float32),
            source=np.array([self.source[c] for c in order], dtype=np.int8),
        )
        return tree, order
