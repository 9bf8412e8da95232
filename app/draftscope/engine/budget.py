"""The verify cost curve (seconds per forward by tree size, measured once per model and device)
and the fixed tree size used by benchmarks and tests; the adaptive per-step policy is in
:mod:`draftscope.engine.policy`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from draftscope.draft_tree import DraftTree, chain_tree
from draftscope.engine.arrays import inference
from draftscope.engine.backends.base import Backend, SlotView
from draftscope.engine.backends.work import ForwardStats

# 1 and 3 are measured, not interpolated: on a CPU the step from one token to two costs most
# (llama.cpp leaves its one-row kernels), and a line drawn from 0 to 2 makes a one-node tree look
# half as dear as it is.
SIZES = (0, 1, 2, 3, 4, 8, 16, 32, 64)
COST_CONTEXT = 256  # cached tokens the verify costs are measured over


def cost_context(max_context: int, context: int = COST_CONTEXT, sizes: Sequence[int] = SIZES) -> int:
    """The context the verify costs are measured at: ``context``, where the model's window leaves room."""
    return max(1, min(context, max_context - max(sizes) - 2))


class DraftBudget(Protocol):
    """How much an answer drafts and verifies each step: asked for the nodes to draft before the
    drafters run, it trims their tree to what is worth a forward, then hears what was accepted and
    what the step cost. :class:`FixedBudget` (benchmarks, tests) and engine.policy.StepPolicy (the
    adaptive one every answer uses by default) follow it."""

    def draft_budget(self) -> int:
        """Nodes the drafters may propose this step (0: decode plainly)."""

    def trim(self, tree: DraftTree, asked: int | None = None, shared: ForwardStats | None = None) -> DraftTree:
        """The part of ``tree`` to verify (``asked``: the nodes asked for; ``shared``: the forward's
        other answers, whose tokens it also costs)."""

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
        """Hear which ``path`` through the verified ``tree`` was accepted, and what the step cost:
        ``draft_seconds`` drafting (``drafted``: the drafters were asked), ``verify_seconds`` its
        forward and sampling, ``shared`` the forward when other answers shared it."""

    def drafting_note(self) -> str | None:
        """Why drafting is off now, in words ("drafting paused: …"); None while it runs."""


class FixedBudget(DraftBudget):
    """Ask for ``size`` nodes every step and verify all of them (no policy)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.last = None

    def draft_budget(self) -> int:
        return self.size

    def trim(self, tree: DraftTree, asked: int | None = None, shared: ForwardStats | None = None) -> DraftTree:
        return tree

    def update(self, tree: DraftTree, path: list[int], **_: Any) -> None:
        pass

    def drafting_note(self) -> str | None:
        return None  # a fixed size is what was asked for: never off by a decision


def monotone(costs: dict[int, float]) -> dict[int, float]:
    """A bigger tree never costs less than a smaller one: a smaller tree can always be verified at
    the price of a bigger one, so each size costs at most what any larger size measured (timing
    noise otherwise makes one size look dearer than the next and the policy avoids it)."""
    out, cheapest = {}, float("inf")
    for n in sorted(costs, reverse=True):
        cheapest = min(cheapest, costs[n])
        out[n] = cheapest
    return dict(sorted(out.items()))


def costs_at(costs: dict[int, float], sizes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Seconds a verify of each of ``sizes`` nodes costs on the monotone curve ``costs`` (size 0, a
    plain step, included): linear between known sizes; past the largest, its last stretch continued
    (from the largest known size at most half of it: two learned neighbours' noise is no slope), and
    at least a plain step's cost per as many tokens as the curve's largest size: a tree past the
    curve is dearer in proportion to its size, never free (a curve flattened by noise, or a GPU's)."""
    known = np.array(sorted(costs), dtype=np.float64)
    seconds = np.array([costs[int(n)] for n in known])
    sizes = np.asarray(sizes, dtype=np.float64)
    out = np.interp(sizes, known, seconds)
    last = known[-1]
    if last <= 0:
        return seconds[-1] * (1.0 + sizes)  # only a plain step is known: each token costs one
    half = known[known <= last / 2][-1]
    slope = max((seconds[-1] - costs[int(half)]) / (last - half), seconds[0] / last)
    beyond = sizes > last
    out[beyond] = seconds[-1] + slope * (sizes[beyond] - last)
    return out


def measure_verify_costs(
    backend: Backend | SlotView,
    *,
    context: int = COST_CONTEXT,
    sizes: Sequence[int] = SIZES,
    repeats: int = 3,
    progress: Callable[[float], None] | None = None,
) -> dict[int, float]:
    """Seconds for one verify of 1 + n tokens (root + chain of n) over a ``context``-token cache,
    on whatever backend runs the model (or one slot of it: a SlotView): the best of ``repeats`` rounds,
    each round over every size (a load spike then hits one round, not every try of one size), made
    monotone in n. ``progress(fraction)`` hears how far it is, in verified tokens (a tree's cost
    grows with its size, so a count of verifies would run ahead of the time)."""
    with inference():  # torch's inference mode where a torch model runs
        return _measure(backend, cost_context(backend.max_context, context, sizes), sizes, repeats, progress)


def _measure(
    backend: Backend | SlotView,
    context: int,
    sizes: Sequence[int],
    repeats: int,
    progress: Callable[[float], None] | None,
) -> dict[int, float]:
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, backend.vocab, context + 1).tolist()
    backend.start(prompt)
    chains = {n: chain_tree(rng.integers(0, backend.vocab, n)) for n in sizes}
    best = {n: float("inf") for n in sizes}
    total, done = (context + repeats * sum(1 + n for n in sizes)), context  # the prompt's read counts too
    for _ in range(repeats):
        for n in sizes:
            t0 = time.perf_counter()
            out = backend.verify(prompt[-1], chains[n])
            float(out.logits[-1, 0])  # waits for an asynchronous device
            best[n] = min(best[n], time.perf_counter() - t0)
            backend.truncate(context)
            done += 1 + n
            if progress is not None:
                progress(done / total)
    return monotone(best)
