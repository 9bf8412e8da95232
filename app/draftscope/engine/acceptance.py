"""What the step policy believes of a draft node before it is verified: P(accepted | parent accepted).

Three layers of belief, each the prior of the next:

- **The prior** (no evidence at all): the node's *share* (its support over its parent's: the fraction
  of matches, or the draft model's probability, that chose this token) times the rule of succession on
  the *run* the node continues: a text the answer has followed for R tokens goes on one more with
  probability (R + 1) / (R + 2). The run at a node is the tree's verbatim match (``match_len``: the copy
  the drafter follows, less the FOUND_MATCH tokens any match needs to be found at all) or the answer's
  own run of accepted drafts, whichever is longer, plus the nodes above it, so a chain's path
  probability to depth d is (R + 1) / (R + d + 1): a long copy is trusted far, a bigram match hardly. A statement about text, not about a machine: how long a draft is worth
  verifying is then decided by the verify curve measured on this machine (engine/policy.py).
- **The calibration** (``Calibration``, shared by every answer of an engine): acceptance learned by
  (source, depth bucket, share bucket, run bucket), the prior worth PRIOR_WEIGHT observations.
- **The answer's own evidence** (``AnswerEvidence``, one per answer): by source, how many rejections
  its recent steps had (older steps decay) against how many the calibration's estimates expected;
  the ratio scales each node's chance of rejection. A copy that has held in this answer drafts long
  chains; a rejection ends the run (short chains while it is short again) and raises the ratio, and
  the run grows back as the copy resumes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from draftscope.draft_tree import DraftTree

SHARE_EDGES = (0.05, 0.15, 0.3, 0.5, 0.7, 0.9)  # buckets of a node's share of its parent's support
DEPTH_EDGES = (1, 2, 4)  # depth 1, 2, 3-4, 5+
# Buckets of the run a node continues (tokens the copy has held above it): a copy may run for
# hundreds of tokens, and a run of 100 holds more surely than a run of 20.
MATCH_EDGES = (2, 4, 8, 16, 32, 64, 128)
# The shortest suffix the drafters search for (their min_suffix): a match this long is how a draft
# was found, not yet evidence that the text goes on.
FOUND_MATCH = 2
PRIOR_WEIGHT = 4.0  # observations the prior is worth, at either level (few: evidence soon decides)
# The answer's own evidence starts from the shared estimate, worth this many expected rejections:
# one, so a copy that holds through what should have given two rejections is trusted three times
# as far, and a rejection where a tenth of one was expected halves the trust.
HAZARD_WEIGHT = 1.0
# Per step, the answer's older evidence is worth this much of its last step's: about the last ten
# steps count, so the answer's current stretch (a copy, or new text) decides, not its beginning.
ANSWER_DECAY = 0.9


def _buckets(values: np.ndarray, edges) -> np.ndarray:
    """Each value's bucket: 0 below the first edge, i from edge i - 1 on."""
    return np.searchsorted(np.asarray(edges, dtype=np.float64), values, side="right")


def shares(tree: DraftTree) -> np.ndarray:
    """Each node's support over its parent's, in [0, 1]. First-level nodes: over the first
    level's total when supports are counts; as they are when they are already probabilities
    (a draft model's, or a merged tree's, whose first level sums to at most 1)."""
    support = tree.support.astype(np.float64)
    if len(tree) == 0:
        return np.zeros(0)
    top = tree.parents < 0
    total = support[top].sum()
    base = support[np.maximum(tree.parents, 0)]
    base[top] = total if total > 1.0 + 1e-6 else 1.0
    out = np.divide(support, base, out=np.zeros_like(support), where=base > 0)
    return np.clip(out, 0.0, 1.0)


def run_prior(runs: np.ndarray) -> np.ndarray:
    """P(a copy that has held ``runs`` tokens holds one more) before any evidence: Laplace's rule."""
    return (runs + 1.0) / (runs + 2.0)


class Calibration:
    """P(a node is accepted | its parent was), by (source, depth bucket, share bucket, run bucket),
    learned from every node whose parent was accepted, the prior worth PRIOR_WEIGHT observations."""

    def __init__(self) -> None:
        self.tested: dict[tuple, float] = {}
        self.accepted: dict[tuple, float] = {}

    @staticmethod
    def keys(sources, depths, share, runs) -> list[tuple]:
        columns = (
            np.asarray(sources, dtype=np.int64),
            _buckets(np.asarray(depths), DEPTH_EDGES),
            _buckets(np.asarray(share), SHARE_EDGES),
            _buckets(np.asarray(runs), MATCH_EDGES),
        )
        return list(zip(*(c.tolist() for c in columns)))

    def probabilities(self, sources, depths, share, runs) -> np.ndarray:
        """Each node's acceptance estimate (arrays of one value per node)."""
        keys = self.keys(sources, depths, share, runs)
        accepted = np.array([self.accepted.get(k, 0.0) for k in keys])
        tested = np.array([self.tested.get(k, 0.0) for k in keys])
        prior = np.asarray(share, dtype=np.float64) * run_prior(np.asarray(runs, dtype=np.float64))
        return (accepted + PRIOR_WEIGHT * prior) / (tested + PRIOR_WEIGHT)

    def probability(self, source: int, depth: int, share: float, run: int = 0) -> float:
        return float(self.probabilities([source], [depth], [share], [run])[0])

    def observe(self, tree: DraftTree, path: list[int], runs: np.ndarray | None = None) -> None:
        """``runs``: the run each node continued when it was kept (default: the tree's match and its depth)."""
        if len(tree) == 0:
            return
        runs = node_runs(tree) if runs is None else runs
        tested, accepted = tested_nodes(tree, path)
        for k, was in zip(
            self.keys(tree.source[tested], tree.depth[tested], shares(tree)[tested], runs[tested]), accepted
        ):
            self.tested[k] = self.tested.get(k, 0.0) + 1.0
            if was:
                self.accepted[k] = self.accepted.get(k, 0.0) + 1.0


def tested_nodes(tree: DraftTree, path: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(the nodes verification compared with the target's token: the first level and the children
    of accepted nodes, whether each was accepted)."""
    on_path = np.zeros(len(tree), dtype=bool)
    on_path[list(path)] = True
    parents = tree.parents
    tested = (parents < 0) | on_path[np.maximum(parents, 0)]
    index = np.flatnonzero(tested)
    return index, on_path[index]


def node_runs(tree: DraftTree, runs_before: dict[int, int] | None = None) -> np.ndarray:
    """The run each node continues if the nodes above it are accepted: the longer of the tree's
    verbatim match (past FOUND_MATCH) and the answer's own run of accepted drafts from the node's
    source (``runs_before``), plus the nodes above it."""
    base = np.full(len(tree), float(max(0, tree.match_len - FOUND_MATCH)))
    if runs_before:
        own = np.array([runs_before.get(int(s), 0) for s in tree.source.tolist()], dtype=np.float64)
        base = np.maximum(base, own)
    return base + tree.depth.astype(np.float64) - 1.0


class AnswerEvidence:
    """One answer's own evidence: by source, the rejections its tested nodes had against those the
    shared estimate expected (older steps decaying: ANSWER_DECAY), a ratio that scales every node's
    chance of rejection (a Gamma-Poisson estimate: the prior, a ratio of 1, worth HAZARD_WEIGHT
    expected rejections); and its runs: the drafts of each source accepted in a row, across steps,
    since its copy last stopped."""

    def __init__(self) -> None:
        self.rejected: dict[int, float] = defaultdict(float)
        self.expected: dict[int, float] = defaultdict(float)
        self.runs: dict[int, int] = {}

    def ratio(self, source: int) -> float:
        """This answer's rejections of ``source``'s nodes over what the shared estimate expected."""
        return (self.rejected.get(source, 0.0) + HAZARD_WEIGHT) / (self.expected.get(source, 0.0) + HAZARD_WEIGHT)

    def combine(self, shared: np.ndarray, sources) -> np.ndarray:
        """The shared estimates ``shared`` with each node's chance of rejection scaled by its source's ratio."""
        ratios = {s: self.ratio(s) for s in set(np.asarray(sources).tolist())}
        scale = np.array([ratios[s] for s in np.asarray(sources).tolist()])
        return np.clip(1.0 - (1.0 - shared) * scale, 0.0, 1.0)

    def observe(self, tree: DraftTree, path: list[int], shared: np.ndarray, *, drafted: bool = True) -> None:
        """After a verified step: its tested nodes' rejections against their shared estimates
        ``shared`` (one per node, before this step was learned), and each source's run
        (``drafted``: the drafters were asked this step)."""
        for store in (self.rejected, self.expected):
            for k in store:
                store[k] *= ANSWER_DECAY
        tested, accepted = tested_nodes(tree, path)
        for source, was, p in zip(tree.source[tested].tolist(), accepted.tolist(), shared[tested].tolist()):
            self.rejected[source] += 0.0 if was else 1.0
            self.expected[source] += 1.0 - p
        self._follow_runs(tree, path, tested, drafted)

    def _follow_runs(self, tree: DraftTree, path: list[int], tested: np.ndarray, drafted: bool) -> None:
        """A source's run grows by its accepted nodes and ends where its copy stopped: a child of the
        last accepted node (or of the root) that was not the target's token, no node of it accepted
        while some were tested, or nothing of it verified when the drafters were asked. A chain
        accepted to its end goes on (the target's token after it may continue the copy)."""
        sources = tree.source.tolist()
        end = path[-1] if path else -1
        on_path = {sources[i] for i in path}
        ended = {sources[i] for i in np.flatnonzero(tree.parents == end).tolist()}
        ended |= {sources[i] for i in tested.tolist()} - on_path
        if drafted:
            ended |= set(self.runs) - set(sources)
        for i in path:
            self.runs[sources[i]] = self.runs.get(sources[i], 0) + 1
        for source in ended:
            self.runs[source] = 0

    def longest_run(self) -> int:
        return max(self.runs.values(), default=0)
