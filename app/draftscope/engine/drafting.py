"""What the engine and drafting share, below both: how the engine makes one drafter of several (a
function drafting hands in), and when a slow drafter must earn its time.

Drafting (drafters/) sits above the engine: an answer drives its request's drafters through the
Drafter verbs alone and never imports drafters/. Several drafters are merged into one step's tree by
the combiner drafters/__init__.py hands in here when the package is imported (CompositeDrafter), as
it is by whoever built the drafters."""

from __future__ import annotations

from collections.abc import Callable, Sequence

# A drafter slower than this share of a plain step must earn its time: the composite sits it out while
# it does not, and the answer's speed says why (engine/answer_speed.py)
SLOW_SHARE = 0.05

_combiner: Callable | None = None


def use_combiner(combiner: Callable) -> None:
    """``combiner(drafters, step_cost=seconds or None, memory=dict)`` makes one drafter of several."""
    global _combiner
    _combiner = combiner


def combined(drafters: Sequence, *, step_cost: float | None, memory: dict):
    """One drafter proposing for all of ``drafters``: ``step_cost`` is a plain step's seconds (a slow
    drafter must earn its time), ``memory`` what the engine keeps of each drafter across answers."""
    if _combiner is None:
        raise ValueError("several drafters need draftscope.drafters imported, to combine them")
    return _combiner(drafters, step_cost=step_cost, memory=memory)
