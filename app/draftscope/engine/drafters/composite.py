"""Several drafters, one tree: every drafter proposes, their trees are merged (shared prefixes
once), and the best nodes under one budget are kept. Scores are comparable across drafters:
counts become the share of their drafter's matches, model drafts carry path probabilities.
Each node remembers the drafter that scored it highest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.engine.drafters.trie import PathTrie


def path_scores(tree: DraftTree) -> np.ndarray:
    """A probability-like score per node: model trees already hold path probabilities; counts
    are divided by the number of matches behind the first level."""
    support = tree.support.astype(np.float64)
    if len(tree) == 0 or (tree.source == DraftSource.MODEL).all():
        return support
    total = support[tree.parents == -1].sum()
    return support / total if total > 0 else support


class CompositeDrafter:
    """Budget goes where drafts get accepted: each source's scores are weighted by its recent
    acceptance rate (accepted / proposed nodes, an exponential average fed by ``feedback``)."""

    name = "composite"
    source = DraftSource.TARGET  # mixed; each node says its own

    def __init__(self, drafters: Sequence, *, smoothing: float = 0.2) -> None:
        if not drafters:
            raise ValueError("a composite drafter needs at least one drafter")
        self.drafters = list(drafters)
        self.smoothing = smoothing
        self.acceptance = {int(d.source): 0.5 for d in self.drafters}

    def feedback(self, tree: DraftTree, accepted_path: Sequence[int]) -> None:
        """Which nodes of the last proposal the target accepted."""
        if len(tree) == 0:
            return
        proposed = Counter(int(s) for s in tree.source.tolist())
        accepted = Counter(int(tree.source[i]) for i in accepted_path)
        for src, n in proposed.items():
            rate = self.acceptance.get(src, 0.5)
            self.acceptance[src] = rate + self.smoothing * (accepted[src] / n - rate)

    def reset(self, context_ids: Sequence[int]) -> None:
        for d in self.drafters:
            d.reset(context_ids)

    def observe(self, accepted_ids: Sequence[int]) -> None:
        for d in self.drafters:
            d.observe(accepted_ids)

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        trees = [d.propose(context_ids, budget) for d in self.drafters]
        trees = [t for t in trees if len(t)]
        if not trees:
            return DraftTree.empty()
        if len(trees) == 1:
            return trees[0]
        return merge_trees(trees, budget, self.acceptance)


def merge_trees(trees: Sequence[DraftTree], budget: int, weights: dict[int, float] | None = None) -> DraftTree:
    """Merge under one budget; ``weights`` scale each source's scores (default 1)."""
    trie = PathTrie()
    q_by_trie_node: dict[int, object] = {}
    for tree in trees:
        scores = path_scores(tree)
        if weights and len(tree):
            scores = scores * np.array([weights.get(int(s), 1.0) for s in tree.source.tolist()])
        q_probs = tree.extra.get("q_probs", {})
        for i in range(len(tree)):
            ids = trie.add(tree.token_path(i), 0.0, int(tree.source[i]), combine="max")
            # Only the node itself gets this tree's score; its ancestors got theirs in BFS order.
            leaf = ids[-1]
            if scores[i] >= trie.score[leaf]:
                trie.score[leaf] = float(scores[i])
                trie.source[leaf] = int(tree.source[i])
            if i in q_probs and int(tree.source[i]) == DraftSource.MODEL:
                q_by_trie_node[leaf] = q_probs[i]
    merged, order = trie.select(budget)
    q = {out: q_by_trie_node[node] for out, node in enumerate(order)
         if node in q_by_trie_node and merged.source[out] == DraftSource.MODEL}
    return DraftTree(merged.tokens, merged.parents, merged.depth, merged.support.astype(np.float32), merged.source,
                     extra={"q_probs": q} if q else {})
