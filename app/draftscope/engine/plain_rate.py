"""Plain decoding's speed by context length: what a speedup compares with, and how a busy computer
is noticed.

A plain step (one token, no draft) costs about ``a + b * context`` seconds: the weights are read
once a step (a) and attention reads every cached position (b), so plain decoding at a 3,600-token
context writes slower than at 100; an answer there compared with a rate measured on a short prompt
looked slower than plain (0.64x) for its context's length alone. The curve is fitted from plain
steps, wherever they run: the plain-speed measurement at load (a short prompt, then a few steps at a
longer context, so the slope is known before the first long answer; again when the window is idle, on
the conversation's own context), and every step of an answer whose tree was empty. Steps are kept by
context bucket (an exponential average each); the slope comes from every bucket once they span
MIN_SPREAD tokens, the level from the latest one (machines drift: one measured 26.9 and 36.7 tokens/s
within 35 minutes).

An answer whose steps ran BUSY_RATIO times slower than they should says so (another program had the
CPU): its steps are not learned, so one busy minute does not become the machine's speed, unless
SETTLE_ANSWERS answers in a row were that slow (then slower is the new normal). A plain step is judged
against the curve; a drafted one (an answer that drafts at every step has no plain step to judge)
against a plain step there plus what its tree's nodes added to a verify at load (``tree_costs``, the
verify costs measured at ``tree_context`` tokens), each node's reading of the longer context counted
at the curve's slope: a bound from above where attention reads the cache once for every row, so a
calm answer is never called busy for its tree; a busy one, many times slower, still is."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

BUCKET_TOKENS = 256  # contexts within one bucket share an average
MIN_SPREAD = 512  # tokens of context the buckets must span before a slope is fitted (closer: noise)
SMOOTHING = 0.3  # weight of a new step in its bucket's average
BUSY_RATIO = 2.0  # plain steps this many times slower than the curve: the computer is busy
MIN_BUSY_STEPS = 4  # steps judged (plain or drafted) an answer needs before it can say the computer is busy
SETTLE_ANSWERS = 3  # busy answers in a row after which their speed is taken as the machine's
KNOWN_SHARE = 0.25  # a plain step within this share of a context (or KNOWN_TOKENS) tells its speed:
KNOWN_TOKENS = 512  # answers run on until the model stops, so an exact length is rarely measured


@dataclass
class _Bucket:
    context: float  # the average context of its steps
    seconds: float  # the average seconds of a plain step there
    at: float  # time.monotonic() of its last step


@dataclass
class PlainRate:
    """The plain step's time by context, fitted from observed plain steps. The stepper's thread
    adds steps while the window's reads the curve: ``buckets`` changes only under ``lock``, and is
    read through :meth:`points` (a copy)."""

    buckets: dict[int, _Bucket] = field(default_factory=dict)
    busy_answers: int = 0  # busy answers in a row (SETTLE_ANSWERS of them settle)
    tree_costs: dict[int, float] = field(default_factory=dict)  # a verify's seconds by tree size, at load
    tree_context: int = 0  # the context they were measured at
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def copied(self) -> dict[int, _Bucket]:
        """The buckets as they are now (copies: safe from another thread's next step)."""
        with self.lock:
            return {k: _Bucket(b.context, b.seconds, b.at) for k, b in self.buckets.items()}

    def points(self) -> list[_Bucket]:
        return list(self.copied().values())

    def observe(self, context: float, seconds: float, at: float | None = None) -> None:
        """A plain step of ``seconds`` at ``context`` cached tokens."""
        if seconds <= 0:
            return
        at = time.monotonic() if at is None else at
        key = int(context) // BUCKET_TOKENS
        with self.lock:
            known = self.buckets.get(key)
            if known is None:
                self.buckets[key] = _Bucket(float(context), seconds, at)
                return
            known.context += SMOOTHING * (context - known.context)
            known.seconds += SMOOTHING * (seconds - known.seconds)
            known.at = at

    def merged(self, other: PlainRate) -> PlainRate:
        """This curve with ``other``'s buckets (an answer's own plain steps) in place of its own."""
        return PlainRate({**self.copied(), **other.copied()}, self.busy_answers)

    def line(self) -> tuple[float, float] | None:
        """(a, b): a plain step costs a + b * context seconds; None before any plain step."""
        points = self.points()
        if not points:
            return None
        latest = max(points, key=lambda p: p.at)
        return latest.seconds - self.slope(points) * latest.context, self.slope(points)

    @staticmethod
    def slope(points: list[_Bucket]) -> float:
        """Seconds a step gains per cached token (least squares; 0 when the contexts lie too close
        together to tell, never negative: attention never gets cheaper with more to read)."""
        contexts = [p.context for p in points]
        if max(contexts) - min(contexts) < MIN_SPREAD:
            return 0.0
        mean_c = sum(contexts) / len(points)
        mean_s = sum(p.seconds for p in points) / len(points)
        spread = sum((c - mean_c) ** 2 for c in contexts)
        return max(0.0, sum((p.context - mean_c) * (p.seconds - mean_s) for p in points) / spread)

    def step_seconds(self, context: float) -> float | None:
        line = self.line()
        return None if line is None else max(1e-6, line[0] + line[1] * context)

    def tokens_per_second(self, context: float) -> float | None:
        """Plain decoding's rate at ``context`` cached tokens (None before any plain step)."""
        seconds = self.step_seconds(context)
        return None if seconds is None else 1.0 / seconds

    def covers(self, context: float) -> bool:
        """Whether ``context`` lies within the contexts observed (a bucket either side): there the
        curve says what a plain step cost; beyond, it guesses the slope."""
        contexts = [b.context for b in self.points()]
        return bool(contexts) and min(contexts) - BUCKET_TOKENS <= context <= max(contexts) + BUCKET_TOKENS

    def knows(self, context: float) -> bool:
        """Whether plain steps near ``context`` were observed (the measurement's, or an answer's
        own): within KNOWN_SHARE of it or KNOWN_TOKENS, whichever is more. Where not, plain decoding
        is worth measuring there; kept rare, as the measurement holds up the next answer."""
        near = max(KNOWN_TOKENS, KNOWN_SHARE * context)
        return any(abs(b.context - context) <= near for b in self.points())

    def spread(self) -> float:
        """Tokens of context between the shortest and the longest buckets (MIN_SPREAD: a slope)."""
        contexts = [b.context for b in self.points()]
        return max(contexts) - min(contexts) if contexts else 0.0

    def costs_measured(self, costs: dict[int, float], context: int) -> None:
        """The verify costs measured at load (seconds by tree size, at ``context`` cached tokens)."""
        self.tree_costs, self.tree_context = dict(costs), context

    def verify_seconds(self, nodes: int, context: float) -> float | None:
        """What a step verifying ``nodes`` drafted nodes at ``context`` should take on a calm machine:
        a plain step there, what the nodes added to a verify at load, and each node's reading of the
        context beyond the load's at the curve's slope (from above). None where the curve does not
        cover ``context`` or no verify cost was measured."""
        line = self.line()
        if line is None or 0 not in self.tree_costs or not self.covers(context):
            return None
        plain = max(1e-6, line[0] + line[1] * context)
        added = extra_cost(self.tree_costs, nodes)
        return plain + added + nodes * line[1] * max(0.0, context - self.tree_context)

    def learn_answer(self, steps: AnswerPlainSteps) -> None:
        """Take an answer's plain steps into the curve, unless they ran busy (SETTLE_ANSWERS busy
        answers in a row are learned all the same: slower is then the machine's speed)."""
        if steps.busy():
            self.busy_answers += 1
            if self.busy_answers < SETTLE_ANSWERS:
                return
        self.busy_answers = 0
        for bucket in steps.own().points():
            self.observe(bucket.context, bucket.seconds, bucket.at)


def extra_cost(costs: dict[int, float], nodes: int) -> float:
    """Seconds ``nodes`` drafted nodes add to a verify on the measured ``costs`` (size 0: a plain
    step): linear between the sizes measured, past the largest at its last stretch's rate."""
    sizes = sorted(costs)
    below = max((n for n in sizes if n <= nodes), default=0)
    above = min((n for n in sizes if n >= nodes), default=None)
    if above is None:  # past the curve: the last stretch continued
        last, before = sizes[-1], sizes[-2] if len(sizes) > 1 else sizes[-1]
        rate = (costs[last] - costs[before]) / (last - before) if last > before else 0.0
        seconds = costs[last] + rate * (nodes - last)
    elif above == below:
        seconds = costs[below]
    else:
        share = (nodes - below) / (above - below)
        seconds = costs[below] + share * (costs[above] - costs[below])
    return max(0.0, seconds - costs[0])


class AnswerPlainSteps:
    """One answer's plain steps: their mean time by context bucket, and how many steps (plain, or
    drafted: :meth:`add_drafted`) ran far slower than the engine's curve said."""

    def __init__(self, reference: PlainRate) -> None:
        self.reference = reference  # the engine's curve (what the machine did before this answer)
        self.sums: dict[int, list[float]] = {}  # bucket -> [contexts, seconds, steps, last time]
        self.steps = self.count = self.slow = 0  # its plain steps; steps the engine's curve could judge, slow ones

    def judge(self, seconds: float, expected: float | None) -> None:
        """A step of ``seconds`` that should have taken ``expected`` (None: nothing to judge it by)."""
        if expected is not None:
            self.count += 1
            self.slow += seconds > BUSY_RATIO * expected

    def add_drafted(self, context: int, nodes: int, seconds: float) -> None:
        """A step that verified ``nodes`` drafted nodes at ``context`` in a forward of ``seconds``:
        judged for busy, never learned (its time is no plain step's)."""
        if seconds > 0:
            self.judge(seconds, self.reference.verify_seconds(nodes, context))

    def add(self, context: int, seconds: float) -> None:
        if seconds <= 0:
            return
        self.steps += 1
        # judged only where the machine's speed was seen: past it, a slower step may be the context's length
        self.judge(seconds, self.reference.step_seconds(context) if self.reference.covers(context) else None)
        sums = self.sums.setdefault(int(context) // BUCKET_TOKENS, [0.0, 0.0, 0, 0.0])
        sums[0] += context
        sums[1] += seconds
        sums[2] += 1
        sums[3] = time.monotonic()

    def own(self) -> PlainRate:
        """Its plain steps as a curve of their own: each bucket the mean of its steps."""
        return PlainRate({k: _Bucket(c / n, s / n, at) for k, (c, s, n, at) in self.sums.items()})

    def busy(self) -> bool:
        """Whether most of its judged steps ran BUSY_RATIO times slower than the machine did before."""
        return self.count >= MIN_BUSY_STEPS and 2 * self.slow > self.count

    def tokens_per_second(self, context: float) -> float | None:
        """Plain decoding's rate at ``context`` around this answer: the engine's curve, levelled by
        this answer's own plain steps (unless they ran busy, or are too few to tell: then the curve
        as it was)."""
        if self.busy() or self.steps < MIN_BUSY_STEPS:
            return self.reference.tokens_per_second(context)
        return self.reference.merged(self.own()).tokens_per_second(context)
