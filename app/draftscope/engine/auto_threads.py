"""Automatic threads (Settings ▸ Generation ▸ Threads at 0, no --threads): all cores, or one left
free, whichever writes faster on this computer, decided at load by a short measurement.

A team of threads as large as the cores waits at every step for its slowest member: where another
program keeps a core busy, the member sharing that core holds the rest up (on one 2-core machine
writing fell from ~31 to 0.4-3 tokens/s while one thread alone cost ~16%). Elsewhere every core
helps. So both counts run a few plain steps (one token, no draft) over a short cache, alternated
ABBA and repeated, so a drift or a spike falls on both; each count keeps its best try. A tie within
TIE goes to one core left free: it leaves room for the window and other programs.

Nothing is measured where the backend cannot change its threads (a graphics card computes, an RPC
child) or computes on one thread. The plain speed is measured after the choice: it depends on it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.base import Backend
from draftscope.engine.stages import Progress, StageClock

log = logging.getLogger(__name__)

CHOOSING_THREADS = "choosing the number of threads"  # its stage at load (engine/stages.py)
TIE = 0.03  # within 3% of each other: one core left free
ROUNDS = 2  # ABBA: each count tried twice
MAX_STEPS = 6  # timed plain steps in one try, at most
MIN_STEPS = 1  # ... and at least, however slow a step (a large model: ten steps in all)
SECONDS = 0.8  # the whole choice, warm-up steps included, at the first step's pace (SmolLM2-135M: 0.3-0.8 s)
CONTEXT = 32  # cached tokens the steps run over
step_clock = time.perf_counter  # what choose_for times its tries with (a test scripts it)


@dataclass(frozen=True)
class ThreadsChoice:
    """What the measurement kept, and why."""

    threads: int  # the count chosen
    step_seconds: dict[int, float]  # a plain step's time at every core and at one fewer (each one's best try)

    @property
    def other(self) -> int:
        return next(n for n in self.step_seconds if n != self.threads)

    @property
    def faster_by(self) -> float:
        """How much faster the chosen count writes than the other (a fraction; about 0 on a tie)."""
        return self.step_seconds[self.other] / self.step_seconds[self.threads] - 1

    def words(self) -> str:
        """What was chosen, in a few words: "chose 7: 12% faster than 8"."""
        if self.faster_by < TIE:
            return f"chose {self.threads}: as fast as {self.other}, one core left free"
        return f"chose {self.threads}: {self.faster_by:.0%} faster than {self.other}"


def choose_threads(
    set_threads: Callable[[int], None],
    step: Callable[[], None],
    cores: int,
    *,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[float], None] | None = None,
) -> ThreadsChoice:
    """Time ``step`` (one plain step) at ``cores`` threads and at ``cores - 1`` (set by
    ``set_threads``), ABBA, and leave the faster set (one fewer on a tie). ``progress(fraction)``
    hears how far it is."""
    if cores < 2:
        raise ValueError(f"a choice needs at least 2 threads to choose from, not {cores}")
    counts = (cores, cores - 1)
    set_threads(cores)
    step()  # the first step after a change starts the new team: never timed
    began = clock()
    step()
    first = max(clock() - began, 1e-9)
    tries = ROUNDS * len(counts)  # each a warm-up step and ``steps`` timed ones, after the two above
    steps = max(MIN_STEPS, min(MAX_STEPS, int((SECONDS / first - 2 - tries) / tries)))
    best = dict.fromkeys(counts, float("inf"))
    order = [n for r in range(ROUNDS) for n in (counts if r % 2 == 0 else counts[::-1])]
    for done, threads in enumerate(order, 1):
        best[threads] = min(best[threads], _timed_try(set_threads, step, threads, steps, clock))
        if progress is not None:
            progress(done / len(order))
    chosen = cores - 1 if best[cores - 1] <= best[cores] * (1 + TIE) else cores
    set_threads(chosen)
    return ThreadsChoice(chosen, best)


def _timed_try(
    set_threads: Callable[[int], None], step: Callable[[], None], threads: int, steps: int, clock: Callable[[], float]
) -> float:
    """Seconds a step took on average over ``steps`` steps at ``threads`` threads."""
    set_threads(threads)
    step()  # the new team's first step (a thread pool started or resized)
    began = clock()
    for _ in range(steps):
        step()
    return (clock() - began) / steps


def choose_for(backend: Backend, *, progress: Progress | None = None) -> ThreadsChoice | None:
    """All of the backend's CPU threads or one fewer, whichever ran plain steps faster, left set;
    None where there is nothing to choose. On the model's own thread, with no answer running (it
    uses slot 0's cache)."""
    cores = backend.cpu_threads()
    if cores is None or cores < 2:
        return None
    context = max(1, min(CONTEXT, backend.max_context - 2))
    prompt = np.random.default_rng(0).integers(0, backend.vocab, context + 1).tolist()
    backend.start(prompt)
    plain = DraftTree.empty()  # a plain step: the root alone

    def step() -> None:
        out = backend.verify(prompt[-1], plain)
        float(out.logits[-1, 0])  # waits for the step's end
        backend.truncate(context)

    choice = choose_threads(
        backend.set_threads, step, cores, clock=step_clock, progress=StageClock(CHOOSING_THREADS, progress)
    )
    log.info(
        "threads: a plain step took %.2f ms on %d and %.2f ms on %d threads; %s",
        *(x for n, s in choice.step_seconds.items() for x in (s * 1000, n)),
        choice.words(),
    )
    return choice
