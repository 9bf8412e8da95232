"""Each step's tree, decided from that step's evidence: speculation that never pays for a tree it
cannot expect to win.

Before drafting, ``draft_budget`` says how many nodes are worth asking the drafters for, from
history only. Drafting too is a cost: while the steps that drafted have lately produced fewer tokens per
second than plain steps, the policy drafts lazily, only as often as keeps what looking costs under
LOOK_SHARE of the plain steps' time (a drafter that costs a tenth of a millisecond still looks every
step; one that costs a tenth of a step looks every tenth), so a step that verifies nothing costs what a
plain step costs.

After drafting, ``trim`` keeps the nodes whose expected tokens pay for their verification. Each
node gets a probability of being accepted given that its parent was, from a calibration table
learned online: by drafter (source), depth, the node's *share* (its support over its parent's:
the fraction of matches, or the draft model's probability, that chose this token) and the length of
the verbatim match the tree continues (an answer that has followed a text for 32 tokens likely goes
on following it: SuffixDecoding's signal). A node's path
probability is the product down the tree; the tree kept is the top-k nodes by path probability
(always a connected tree) with k maximising (1 + expected accepted) / cost(k), k = 0 being plain
decoding. Costs come from a measured curve of verify time by tree size, kept fresh by the steps
actually run. Trimming by what was drafted never biases the answer: verification emits the
target's own token at every position (engine.verify).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from draftscope.draft_tree import DraftTree
from draftscope.engine.budget import DraftBudget, monotone

SHARE_EDGES = (0.05, 0.15, 0.3, 0.5, 0.7, 0.9)  # buckets of a node's share of its parent's support
DEPTH_EDGES = (1, 2, 4)  # depth 1, 2, 3-4, 5+
MATCH_EDGES = (8, 16, 32)  # the tree's verbatim match: under 8 tokens, 8-15, 16-31, 32+
PRIOR_WEIGHT = 4.0  # how many observations the prior (the share itself, discounted) is worth
# Before evidence, a share of s is taken as an s * discount chance of acceptance, the discount
# growing with the verbatim match (by MATCH_EDGES bucket): a long copy is likely to go on.
PRIOR_DISCOUNT = (0.6, 0.75, 0.9, 0.97)
EXPLORE_SHARE = 0.02  # what exploring may cost, as a share of the time of plain steps
LOOK_SHARE = 0.01  # what drafting that has not paid lately may cost, as a share of the plain steps' time
MAX_LOOK_INTERVAL = 48  # steps: even the dearest drafter looks this often (a copy-heavy stretch is noticed)
PAUSED_AFTER = 8  # steps in a row the policy kept plain for cost (exploring aside): drafting is said to be paused
# Why drafting is off, for the speedup panel and the status bar: a short head, a colon, the why.
PAUSED_NOTE = "drafting paused: on this machine a draft costs more than it saves; it resumes when drafts would pay"
COST_REASONS = ("plain: drafts cannot pay", "plain: drafting does not pay lately", "explore")


def _bucket(value: float, edges) -> int:
    for i, edge in enumerate(edges):
        if value < edge:
            return i
    return len(edges)


@dataclass
class Decision:
    """What the policy did this step, for the panels and the bench."""

    asked: int  # nodes asked of the drafters
    proposed: int  # nodes they proposed
    kept: int  # nodes verified
    expected: float  # expected accepted tokens of the kept tree
    reason: str  # "tree", "plain: drafts cannot pay", "plain: drafting does not pay lately", "explore"


def shares(tree: DraftTree) -> np.ndarray:
    """Each node's support over its parent's, in [0, 1]. First-level nodes: over the first
    level's total when supports are counts; as they are when they are already probabilities
    (a draft model's, or a merged tree's, whose first level sums to at most 1)."""
    support = tree.support.astype(np.float64)
    n = len(tree)
    out = np.zeros(n)
    top = tree.parents == -1
    total = support[top].sum()
    top_base = total if total > 1.0 + 1e-6 else 1.0
    for i in range(n):
        parent = int(tree.parents[i])
        base = top_base if parent < 0 else support[parent]
        out[i] = support[i] / base if base > 0 else 0.0
    return np.clip(out, 0.0, 1.0)


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


class Calibration:
    """P(a node is accepted | its parent was), by (source, depth bucket, share bucket, match
    bucket), learned from every node whose parent was accepted, with the share itself as a weak
    prior."""

    def __init__(self) -> None:
        self.tested: dict[tuple, float] = {}
        self.accepted: dict[tuple, float] = {}

    @staticmethod
    def key(source: int, depth: int, share: float, match: int = 0) -> tuple:
        return int(source), _bucket(depth, DEPTH_EDGES), _bucket(share, SHARE_EDGES), _bucket(match, MATCH_EDGES)

    def probability(self, source: int, depth: int, share: float, match: int = 0) -> float:
        k = self.key(source, depth, share, match)
        prior = PRIOR_DISCOUNT[k[3]] * share
        return (self.accepted.get(k, 0.0) + PRIOR_WEIGHT * prior) / (self.tested.get(k, 0.0) + PRIOR_WEIGHT)

    def observe(self, tree: DraftTree, path: list[int]) -> None:
        if len(tree) == 0:
            return
        on_path = set(path)
        share = shares(tree)
        for i in range(len(tree)):
            parent = int(tree.parents[i])
            if parent >= 0 and parent not in on_path:
                continue  # never tested: verification stopped above it
            k = self.key(int(tree.source[i]), int(tree.depth[i]), float(share[i]), tree.match_len)
            self.tested[k] = self.tested.get(k, 0.0) + 1.0
            if i in on_path:
                self.accepted[k] = self.accepted.get(k, 0.0) + 1.0


class StepPolicy(DraftBudget):
    def __init__(
        self,
        costs: dict[int, float],
        *,
        max_size: int = 64,
        explore_every: int = 6,
        smoothing: float = 0.3,
        calibration: Calibration | None = None,
    ) -> None:
        self.costs = monotone({n: c for n, c in costs.items() if n <= max_size})
        if 0 not in self.costs:
            raise ValueError("the cost curve needs the cost of a plain step (size 0)")
        self.max_size = max(self.costs)
        self.explore_every = explore_every
        self.smoothing = smoothing
        self.calibration = calibration or Calibration()
        # Tokens and seconds of recent steps that drafted (an exponential average), against plain ones.
        self._draft_tokens: float | None = None
        self._draft_seconds: float | None = None
        self._idle = 0  # steps since the drafters were last asked
        self._look_seconds: float | None = None  # what asking the drafters costs a step (an exponential average)
        self._unverified = 0  # steps whose drafts were all trimmed since one was last verified
        self._my_tokens = 1  # this answer's tokens in its last forward
        self._kept_plain = 0  # steps in a row kept plain because drafts did not pay (PAUSED_AFTER)
        self.last = Decision(0, 0, 0, 0.0, "tree")

    # ------------------------------------------------------------------ costs

    def cost(self, n: int) -> float:
        sizes = list(self.costs)
        if n in self.costs:
            return self.costs[n]
        if n >= sizes[-1]:
            return self.costs[sizes[-1]] * n / sizes[-1]
        hi = next(s for s in sizes if s >= n)
        lo = max(s for s in sizes if s <= n)
        w = (n - lo) / (hi - lo)
        return self.costs[lo] * (1 - w) + self.costs[hi] * w

    def _learn_cost(self, n: int, seconds: float) -> None:
        """Learned at the size verified, never at a neighbour's: a one-node tree learned into the plain
        step's cost made plain steps look dear and every tree look cheap. A size not measured yet
        starts from the curve's estimate."""
        if n > self.max_size:
            return
        known = self.costs.get(n, self.cost(n))
        self.costs[n] = known + self.smoothing * (seconds - known)
        self.costs = monotone(self.costs)

    def explore_interval(self) -> int:
        """Steps between explorations (verifying the likeliest node when no tree pays): a wasted
        exploration costs ``cost(1) - cost(0)``, kept to about EXPLORE_SHARE of the plain steps'
        time, so a CPU where one more token nearly doubles a step explores rarely and a GPU where
        it is nearly free explores every ``explore_every`` steps."""
        extra = max(0.0, self.cost(1) - self.costs[0]) / self.costs[0]
        return max(self.explore_every, math.ceil(extra / EXPLORE_SHARE))

    # ------------------------------------------------------------------ before drafting

    def drafting_pays(self) -> bool:
        """Whether recent drafting steps produced more tokens per second than plain steps do."""
        if self._draft_seconds is None:
            return True
        return self._draft_tokens / self._draft_seconds > 1.0 / self.costs[0]

    def look_interval(self) -> int:
        """Steps between asking the drafters while drafting has not paid lately: their cost kept
        to LOOK_SHARE of the plain steps' time, at most MAX_LOOK_INTERVAL."""
        if not self._look_seconds:
            return 1
        return max(1, min(MAX_LOOK_INTERVAL, math.ceil(self._look_seconds / (LOOK_SHARE * self.costs[0]))))

    def draft_budget(self) -> int:
        if self.drafting_pays():
            self._idle = 0
            return self.max_size
        self._idle += 1
        if self._idle >= self.look_interval():
            self._idle = 0
            return self.max_size
        return 0

    # ------------------------------------------------------------------ after drafting

    def path_probabilities(self, tree: DraftTree) -> np.ndarray:
        share = shares(tree)
        p = np.zeros(len(tree))
        for i in range(len(tree)):  # BFS order: a parent comes before its children
            parent = int(tree.parents[i])
            above = 1.0 if parent < 0 else p[parent]
            p[i] = above * self.calibration.probability(
                int(tree.source[i]), int(tree.depth[i]), float(share[i]), tree.match_len
            )
        return p

    def _others(self, shared) -> tuple[int, int]:
        """(tokens, answers) the other answers put in the forward this one shares (0, 0 alone)."""
        if shared is None or shared.answers <= 1:
            return 0, 0
        return max(0, shared.tokens - self._my_tokens), shared.answers - 1

    def trim(self, tree: DraftTree, asked: int | None = None, shared=None) -> DraftTree:
        """``shared``: the last forward this answer shared with others (slots.ForwardStats), whose
        tokens the tree's nodes are added to: a node costs what it adds to that forward, and pays
        when the forward's tokens for every answer per second grow."""
        n = len(tree)
        asked = n if asked is None else asked
        if n == 0:
            self.last = Decision(
                asked, 0, 0, 0.0, "plain: no drafts" if asked else "plain: drafting does not pay lately"
            )
            self._count_plain()
            return tree
        p = self.path_probabilities(tree)
        # Children never outrank their parent (p only shrinks down a path); ties go to the shallower.
        order = sorted(range(n), key=lambda i: (-p[i], int(tree.depth[i]), i))
        others, their_tokens = self._others(shared)  # each other answer gets at least its own token
        best_k, best_rate, gain = 0, (their_tokens + 1.0) / self.cost(others), 1.0
        best_gain = 1.0
        for k, i in enumerate(order, start=1):
            gain += p[i]
            rate = (their_tokens + gain) / self.cost(others + k)
            if rate > best_rate:
                best_k, best_rate, best_gain = k, rate, gain
        reason = "tree"
        if best_k == 0:
            self._unverified += 1
            reason = "plain: drafts cannot pay"
            if self._unverified >= self.explore_interval() and order:
                # Verify the likeliest node now and then: drafts that start to be accepted (a
                # stretch the datastore knows) are only noticed if some are verified.
                best_k, best_gain, reason = 1, 1.0 + p[order[0]], "explore"
        if best_k:
            self._unverified = 0
        keep = np.zeros(n, dtype=bool)
        keep[order[:best_k]] = True
        self.last = Decision(asked, n, int(keep.sum()), best_gain - 1.0, reason)
        self._count_plain()
        return subtree(tree, keep)

    # ------------------------------------------------------------------ after verifying

    def update(
        self,
        tree: DraftTree,
        path: list[int],
        *,
        draft_seconds: float,
        verify_seconds: float,
        drafted: bool,
        shared=None,
    ) -> None:
        self.calibration.observe(tree, path)
        self._my_tokens = 1 + len(tree)
        if shared is not None and shared.answers > 1:
            # a shared forward's own time (the answer's verify_seconds include waiting for the others)
            self._learn_cost(shared.tokens - 1, shared.seconds)
        elif verify_seconds > 0:
            self._learn_cost(len(tree), verify_seconds)
        if drafted:
            a = self.smoothing
            self._look_seconds = (
                draft_seconds
                if self._look_seconds is None
                else (self._look_seconds + a * (draft_seconds - self._look_seconds))
            )
            tokens, seconds = 1.0 + len(path), draft_seconds + verify_seconds
            if self._draft_seconds is None:
                self._draft_tokens, self._draft_seconds = tokens, seconds
            else:
                a = self.smoothing
                self._draft_tokens += a * (tokens - self._draft_tokens)
                self._draft_seconds += a * (seconds - self._draft_seconds)

    def _count_plain(self) -> None:
        """After each trim: how long the policy has kept steps plain because drafts do not pay
        (drafters that proposed nothing neither count nor break the run: that is not the policy)."""
        if self.last.reason in COST_REASONS:
            self._kept_plain += 1
        elif self.last.reason == "tree":
            self._kept_plain = 0

    def drafting_note(self) -> str | None:
        """PAUSED_NOTE while the policy has kept every step plain for cost lately, else None."""
        return PAUSED_NOTE if self._kept_plain >= PAUSED_AFTER else None

    # Interface shared with FixedBudget (the engine calls these)
    def expected_rate(self) -> float:
        if self._draft_seconds is None:
            return math.nan
        return self._draft_tokens / self._draft_seconds
