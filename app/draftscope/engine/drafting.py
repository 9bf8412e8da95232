"""What the engine and drafting share, below both: what the engine asks of a drafter (``Drafting``), how
the engine makes one drafter of several (a function drafting hands in), and when a slow drafter must
earn its time.

Drafting (drafters/) sits above the engine: an answer drives its request's drafters through the
Drafter verbs alone and never imports drafters/. ``Drafting`` states those verbs as a structural type
(drafters/interface.py's Drafter and every drafter follow it). Several drafters are merged into one
step's tree by the combiner drafters/__init__.py hands in here when the package is imported
(CompositeDrafter), as it is by whoever built the drafters."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from draftscope.draft_tree import DraftTree

if TYPE_CHECKING:
    from draftscope.engine.arrays import Array
    from draftscope.engine.sampling import PositionNoise
    from draftscope.rules import SamplingParams

# A drafter slower than this share of a plain step must earn its time: the composite sits it out while
# it does not, and the answer's speed says why (engine/answer_speed.py)
SLOW_SHARE = 0.05


class Drafting(Protocol):
    """The verbs an answer (engine/answer.py) calls on a drafter, in this order: ``set_sampling`` and
    ``reset`` at the start, then each step ``propose``, ``observe`` and ``feedback`` (``set_hidden``
    after each forward, for a drafter that ``wants_hidden``)."""

    @property
    def name(self) -> str: ...

    @property
    def wants_hidden(self) -> bool: ...

    def set_sampling(self, params: SamplingParams, noise: PositionNoise | None) -> None: ...

    def reset(self, context_ids: Sequence[int]) -> None: ...

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree: ...

    def observe(self, accepted_ids: Sequence[int]) -> None: ...

    def set_hidden(self, hidden: Array) -> None: ...

    def feedback(self, tree: DraftTree, accepted_path: Sequence[int]) -> None: ...


# combiner(drafters, step_cost=seconds or None, memory=dict): one drafter of several
Combiner = Callable[..., Drafting]

_combiner: Combiner | None = None


def use_combiner(combiner: Combiner) -> None:
    """``combiner(drafters, step_cost=seconds or None, memory=dict)`` makes one drafter of several."""
    global _combiner
    _combiner = combiner


def combined(drafters: Sequence[Drafting], *, step_cost: float | None, memory: dict) -> Drafting:
    """One drafter proposing for all of ``drafters``: ``step_cost`` is a plain step's seconds (a slow
    drafter must earn its time), ``memory`` what the engine keeps of each drafter across answers."""
    if _combiner is None:
        raise ValueError("several drafters need draftscope.drafters imported, to combine them")
    return _combiner(drafters, step_cost=step_cost, memory=memory)
