"""Each step's tree, decided from that step's evidence: speculation that never pays for a tree it
cannot expect to win.

Before drafting, ``draft_budget`` says how many nodes are worth asking the drafters for, from
history only. Drafting too is a cost: while the steps that drafted have lately produced fewer tokens per
second than plain steps, the policy drafts lazily, only as often as keeps what looking costs under
LOOK_SHARE of the plain steps' time (a drafter that costs a tenth of a millisecond still looks every
step; one that costs a tenth of a step looks every tenth), so a step that verifies nothing costs what a
plain step costs.

After drafting, ``trim`` keeps the nodes whose expected tokens pay for their verification. Each
node gets a probability of being accepted given that its parent was (engine/acceptance.py: a prior
from the node's share and the run of text it continues, the calibration learned across answers, and
this answer's own recent evidence over both). A node's path probability is the product down the
tree; the tree kept is the top-k nodes by path probability (always a connected tree) with k
maximising (1 + expected accepted) / cost(k), k = 0 being plain decoding. Costs come from the curve of
verify time by tree size measured at load (engine/budget.py), extended past its largest size by its
last stretch, and kept fresh by the steps actually run (forward and the rows' sampling together).
So the same code drafts 64 nodes and more where this machine verifies them nearly as fast as one (a
flat curve) and a few where each node is dear (a steep one); no constant is tuned for either.
Trimming by what was drafted never biases the answer: verification emits the target's own token at
every position (engine.verify).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from draftscope.draft_tree import DraftTree, subtree
from draftscope.engine.acceptance import AnswerEvidence, Calibration, node_runs, shares
from draftscope.engine.backends.work import MAX_DRAFT, ForwardStats
from draftscope.engine.budget import DraftBudget, costs_at, monotone

__all__ = ["Calibration", "Decision", "StepPolicy", "shares", "subtree"]

EXPLORE_SHARE = 0.02  # what exploring may cost, as a share of the time of plain steps
LOOK_SHARE = 0.01  # what drafting that has not paid lately may cost, as a share of the plain steps' time
MAX_LOOK_INTERVAL = 48  # steps: even the dearest drafter looks this often (a copy-heavy stretch is noticed)
PAUSED_AFTER = 8  # steps in a row the policy kept plain for cost (exploring aside): drafting is said to be paused
# Why drafting is off, for the speedup panel and the status bar: a short head, a colon, the why.
PAUSED_NOTE = "drafting paused: on this machine a draft costs more than it saves; it resumes when drafts would pay"
COST_REASONS = ("plain: drafts cannot pay", "plain: drafting does not pay lately", "explore")


@dataclass
class Decision:
    """What the policy did this step, for the panels and the bench."""

    asked: int  # nodes asked of the drafters
    proposed: int  # nodes they proposed
    kept: int  # nodes verified
    expected: float  # expected accepted tokens of the kept tree
    reason: str  # "tree", "plain: drafts cannot pay", "plain: drafting does not pay lately", "explore"


class StepPolicy(DraftBudget):
    """One answer's policy (``calibration``: what the engine's answers learned, shared)."""

    def __init__(
        self,
        costs: dict[int, float],
        *,
        max_size: int | None = None,
        explore_every: int = 6,
        smoothing: float = 0.3,
        calibration: Calibration | None = None,
    ) -> None:
        """``max_size``: the nodes a verify takes (the backend's max_tree; None: any), at most MAX_DRAFT."""
        self.max_size = MAX_DRAFT if max_size is None else max(1, min(max_size, MAX_DRAFT))
        self.costs = monotone({n: c for n, c in costs.items() if n <= self.max_size})
        if 0 not in self.costs:
            raise ValueError("the cost curve needs the cost of a plain step (size 0)")
        # Drafters are asked for this many nodes until a run says more could pay (``draft_budget``).
        self.base_ask = min(self.max_size, max(max(self.costs), 1))
        self.explore_every = explore_every
        self.smoothing = smoothing
        self.calibration = calibration or Calibration()
        self.evidence = AnswerEvidence()  # this answer's own acceptance and runs
        self._last_match = 0  # the verbatim match of the last tree verified
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
        return float(costs_at(self.costs, [n])[0])

    def _learn_cost(self, n: int, seconds: float) -> None:
        """Learned at the size verified, never at a neighbour's: a one-node tree learned into the plain
        step's cost made plain steps look dear and every tree look cheap. A size not measured yet
        (one past the measured curve too) starts from the curve's estimate."""
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
        if self._draft_tokens is None or self._draft_seconds is None:  # (set together)
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
            return self._ask()
        self._idle += 1
        if self._idle >= self.look_interval():
            self._idle = 0
            return self._ask()
        return 0

    def _ask(self) -> int:
        """Nodes to ask the drafters for: the measured curve's largest size, and twice the copy's run
        while it is longer (the longest run of accepted drafts in this answer, or the last tree's
        verbatim match), up to ``max_size``: a long copy may pay past the curve, and asking every
        step for hundreds of nodes would cost drafting and trimming time where nothing is copied."""
        run = max(self.evidence.longest_run(), self._last_match)
        return max(self.base_ask, min(self.max_size, 2 * run))

    # ------------------------------------------------------------------ after drafting

    def path_probabilities(self, tree: DraftTree) -> np.ndarray:
        """Each node's probability of being accepted (its whole path from the root)."""
        p = self.node_probabilities(tree, node_runs(tree, self.evidence.runs)).tolist()
        parents = tree.parents.tolist()
        for i, parent in enumerate(parents):  # BFS order: a parent comes before its children
            if parent >= 0:
                p[i] *= p[parent]
        return np.array(p)

    def node_probabilities(self, tree: DraftTree, runs: np.ndarray) -> np.ndarray:
        """P(node accepted | parent accepted): the shared calibration, updated by this answer's evidence."""
        return self.evidence.combine(self._shared(tree, runs), tree.source)

    def _shared(self, tree: DraftTree, runs: np.ndarray) -> np.ndarray:
        return self.calibration.probabilities(tree.source, tree.depth, shares(tree), runs)

    def _others(self, shared: ForwardStats | None) -> tuple[int, int]:
        """(tokens, answers) the other answers put in the forward this one shares (0, 0 alone)."""
        if shared is None or shared.answers <= 1:
            return 0, 0
        return max(0, shared.tokens - self._my_tokens), shared.answers - 1

    def trim(self, tree: DraftTree, asked: int | None = None, shared: ForwardStats | None = None) -> DraftTree:
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
        order = np.lexsort((np.arange(n), tree.depth, -p))
        others, their_tokens = self._others(shared)  # each other answer gets at least its own token
        gains = 1.0 + np.cumsum(p[order])
        rates = (their_tokens + gains) / costs_at(self.costs, others + np.arange(1, n + 1))
        best = int(np.argmax(rates))
        plain_rate = (their_tokens + 1.0) / self.cost(others)
        best_k, best_gain = (best + 1, float(gains[best])) if rates[best] > plain_rate else (0, 1.0)
        reason = "tree"
        if best_k == 0:
            self._unverified += 1
            reason = "plain: drafts cannot pay"
            if self._unverified >= self.explore_interval():
                # Verify the likeliest node now and then: drafts that start to be accepted (a
                # stretch the datastore knows) are only noticed if some are verified.
                best_k, best_gain, reason = 1, 1.0 + float(p[order[0]]), "explore"
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
        shared: ForwardStats | None = None,
    ) -> None:
        runs = node_runs(tree, self.evidence.runs)  # as they were when the tree was kept
        self.evidence.observe(tree, path, self._shared(tree, runs), drafted=drafted)
        self.calibration.observe(tree, path, runs)
        if drafted:  # a step that drafted nothing ends the match
            self._last_match = tree.match_len
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
            if self._draft_tokens is None or self._draft_seconds is None:  # (set together)
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
