"""Several drafters, one tree: every drafter proposes, their trees are merged (shared prefixes
once), and the best nodes under one budget are kept. Scores are comparable across drafters:
counts become the share of their drafter's matches, model drafts carry path probabilities.
Each node remembers the drafter that scored it highest.

A drafter that takes time (a draft model) runs only while what it gets accepted pays for its
time: tokens accepted from it per step × the time of a plain step ≥ its drafting time (both
recent averages). Otherwise it sits out, and tries again after an interval that doubles each time
it still does not pay (decided from history before any drafting).

Every drafter's proposal is deterministic given the answer's seed (a draft model couples its
drafts to the seeded noise), so merging and trimming by score never bias an answer.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafter_kinds import probability_sources
from draftscope.drafters.interface import Drafter
from draftscope.drafters.path_trie import PathTrie
from draftscope.engine import drafting


def path_scores(tree: DraftTree) -> np.ndarray:
    """A probability-like score per node: the kinds whose support is a probability (drafter_kinds.py)
    hold path probabilities already; counts are divided by the number of matches behind the first level."""
    support = tree.support.astype(np.float64)
    if len(tree) == 0 or np.isin(tree.source, probability_sources()).all():
        return support
    total = support[tree.parents == -1].sum()
    return support / total if total > 0 else support


class CompositeDrafter(Drafter):
    """Budget goes where drafts get accepted: each source's scores are weighted by its recent
    acceptance rate (accepted / proposed nodes, an exponential average fed by ``feedback``)."""

    name = "composite"
    source = DraftSource.TARGET  # mixed; each node says its own

    SLOW_SHARE = drafting.SLOW_SHARE  # a drafter slower than this share of a plain step must earn its time
    FIRST_RETRY, LAST_RETRY = 6, 64  # steps a drafter that does not pay sits out (doubling)

    def __init__(
        self, drafters: Sequence, *, smoothing: float = 0.2, step_cost: float | None = None, memory: dict | None = None
    ) -> None:
        if not drafters:
            raise ValueError("a composite drafter needs at least one drafter")
        self.drafters = list(drafters)
        self.smoothing = smoothing
        self.acceptance = {int(d.source): 0.5 for d in self.drafters}
        self.step_cost = step_cost  # seconds of a plain step (the engine's cost curve); None: never gate
        # Per drafter (by name; ``memory`` carries it from answer to answer): recent drafting seconds,
        # accepted tokens per step it ran (None: not seen yet, so it runs), and its sitting out.
        memory = {} if memory is None else memory
        self._gate = [
            memory.setdefault(d.name, {"seconds": 0.0, "tokens": None, "idle": 0, "retry": self.FIRST_RETRY})
            for d in self.drafters
        ]
        self._ran: list[bool] = [False] * len(self.drafters)

    def _should_run(self, i: int) -> bool:
        g = self._gate[i]
        if self.step_cost is None or g["tokens"] is None or g["seconds"] <= self.SLOW_SHARE * self.step_cost:
            return True
        if g["tokens"] * self.step_cost >= g["seconds"]:
            g["retry"] = self.FIRST_RETRY
            return True
        g["idle"] += 1
        if g["idle"] >= g["retry"]:
            g["idle"], g["retry"] = 0, min(2 * g["retry"], self.LAST_RETRY)
            return True
        return False

    def feedback(self, tree: DraftTree, accepted_path: Sequence[int]) -> None:
        """Which nodes of the last proposal the target accepted."""
        accepted = Counter(int(tree.source[i]) for i in accepted_path)
        for i, d in enumerate(self.drafters):
            if self._ran[i]:
                got, before = accepted[int(d.source)], self._gate[i]["tokens"]
                self._gate[i]["tokens"] = got if before is None else before + self.smoothing * (got - before)
        self._ran = [False] * len(self.drafters)  # a step that drafted nothing teaches nothing
        if len(tree) == 0:
            return
        proposed = Counter(int(s) for s in tree.source.tolist())
        for src, n in proposed.items():
            rate = self.acceptance.get(src, 0.5)
            self.acceptance[src] = rate + self.smoothing * (accepted[src] / n - rate)

    def reset(self, context_ids: Sequence[int]) -> None:
        for d in self.drafters:
            d.reset(context_ids)

    def observe(self, accepted_ids: Sequence[int]) -> None:
        for d in self.drafters:
            d.observe(accepted_ids)

    @property
    def wants_hidden(self) -> bool:
        return any(d.wants_hidden for d in self.drafters)

    def set_hidden(self, hidden) -> None:
        for d in self.drafters:
            if d.wants_hidden:
                d.set_hidden(hidden)

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        trees = []
        for i, d in enumerate(self.drafters):
            self._ran[i] = self._should_run(i)
            if not self._ran[i]:
                continue
            started = time.perf_counter()
            trees.append(d.propose(context_ids, budget))
            seconds, g = time.perf_counter() - started, self._gate[i]
            g["seconds"] = seconds if not g["seconds"] else g["seconds"] + self.smoothing * (seconds - g["seconds"])
        trees = [t for t in trees if len(t)]
        if not trees:
            return DraftTree.empty()
        if len(trees) == 1:
            return trees[0]
        return merge_trees(trees, budget, self.acceptance)


def merge_trees(trees: Sequence[DraftTree], budget: int, weights: dict[int, float] | None = None) -> DraftTree:
    """Trees merged (shared prefixes once) and the best ``budget`` nodes kept; ``weights`` scale
    each source's scores (default 1). A node keeps the source that scored it highest."""
    if len(trees) == 1 and not weights and len(trees[0]) <= budget:
        return trees[0]
    trie = PathTrie()
    for tree in trees:
        scores = path_scores(tree)
        if weights and len(tree):
            scores = scores * np.array([weights.get(int(s), 1.0) for s in tree.source.tolist()])
        for i in range(len(tree)):
            leaf = trie.add(tree.token_path(i), 0.0, int(tree.source[i]), combine="max")[-1]
            # Only the node itself gets this tree's score; its ancestors got theirs in BFS order.
            if scores[i] >= trie.score[leaf]:
                trie.score[leaf] = float(scores[i])
                trie.source[leaf] = int(tree.source[i])
    merged, _ = trie.select(budget)
    # The longest match's tree says what the copy is (its run, a re-anchor) for the step policy.
    longest = max(trees, key=lambda t: t.match_len)
    return DraftTree(
        merged.tokens,
        merged.parents,
        merged.depth,
        merged.support.astype(np.float32),
        merged.source,
        match_len=longest.match_len,
        extra=dict(longest.extra),
    )
