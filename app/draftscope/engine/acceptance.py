"""What the step policy believes of a draft node before it is verified: P(accepted | parent accepted).

Three layers of belief, each the prior of the next:

- **The prior** (no evidence at all): the node's *share* (its support over its parent's: the fraction
  of matches, or the draft model's probability, that chose this token) times the rule of succession on
  the *run* the node continues: a text the answer has followed for R tokens goes on one more with
  probability (R + 1) / (R + 2). The run at a node is the tree's verbatim match (``match_len``: the copy
  the drafter follows, less the FOUND_MATCH tokens any match needs to be found at all) or the answer's
  own run of accepted drafts, whichever is longer, plus the nodes above it, so a chain's path
  probability to depth d is (R + 1) / (R + d + 1): a long copy is trusted far, a bigram match
  hardly. A statement about text, not about a machine: how long a draft is worth verifying is then
  decided by the verify curve measured on this machine (engine/policy.py).
- **The calibration** (``Calibration``, shared by every answer of an engine): acceptance learned by
  (source, depth bucket, share bucket, run bucket), the prior worth PRIOR_WEIGHT observations.
- **The answer's own evidence** (``AnswerEvidence``, one per answer): by source, how many
  acceptances and rejections its recent steps had (older steps decay) against how many the
  calibration's estimates expected; their ratios scale each node's odds. A copy that has held in this
  answer drafts long chains; a rejection ends the run (short chains while it is short again) and
  lowers the odds, and the run grows back as the copy resumes.
"""

from __future__ import annotations

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
# The answer's own evidence starts from the shared estimate, worth this many expected events: one,
# so a copy that holds through what should have given two rejections has its odds tripled, and a
# rejection where a tenth of one was expected about halves them.
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
    """One answer's own evidence: by source, its tested nodes' acceptances and rejections against
    those the shared estimates expected (older steps decaying: ANSWER_DECAY). The rarer outcome's
    ratio of observed to expected scales each node's odds of acceptance: acceptances where drafts are
    mostly rejected (raising them only), rejections where they mostly hold (a long copy); the ratio's
    prior, 1, is worth HAZARD_WEIGHT expected events. And its runs: the drafts of each
    source accepted in a row, across steps, since its copy last stopped."""

    def __init__(self) -> None:
        self.seen: dict[int, np.ndarray] = {}  # source -> [accepted, expected accepted, rejected, expected rejected]
        self.runs: dict[int, int] = {}

    def odds_ratio(self, source: int) -> float:
        """How much likelier this answer's nodes of ``source`` are accepted than the shared estimate says."""
        accepted, expected_accepted, rejected, expected_rejected = self.seen.get(source, np.zeros(4)) + HAZARD_WEIGHT
        if expected_accepted <= expected_rejected:  # the rarer outcome carries the evidence (counted once)
            # Where drafts are mostly rejected, the answer may only raise their odds: lowered, its
            # drafts would be trimmed and tested no more, and the lowering would never be undone.
            return max(1.0, accepted / expected_accepted)
        return expected_rejected / rejected

    def combine(self, shared: np.ndarray, sources) -> np.ndarray:
        """The shared estimates ``shared`` with each node's odds scaled by its source's ratio."""
        sources = np.asarray(sources).tolist()
        ratios = {s: self.odds_ratio(s) for s in set(sources)}
        odds = np.clip(shared, 0.0, 1.0 - 1e-9) / (1.0 - np.clip(shared, 0.0, 1.0 - 1e-9))
        odds = odds * np.array([ratios[s] for s in sources])
        return odds / (1.0 + odds)

    def observe(self, tree: DraftTree, path: list[int], shared: np.ndarray, *, drafted: bool = True) -> None:
        """After a verified step: its tested nodes' outcomes against their shared estimates
        ``shared`` (one per node, before this step was learned), and each source's run
        (``drafted``: the drafters were asked this step)."""
        for counts in self.seen.values():
            counts *= ANSWER_DECAY
        tested, accepted = tested_nodes(tree, path)
        for source, was, p in zip(tree.source[tested].tolist(), accepted.tolist(), shared[tested].tolist()):
            self.seen.setdefault(source, np.zeros(4))
            self.seen[source] += (float(was), p, 1.0 - float(was), 1.0 - p)
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
