"""The engine makes one drafter of several with what drafting hands in (engine/drafting.py): it
never imports drafters/, which sits above it."""

from __future__ import annotations

import pytest

import draftscope.engine.drafting as drafting
from draftscope.drafters import CompositeDrafter, ContextDrafter


def test_drafting_hands_the_engine_its_composite():
    several = [ContextDrafter(), ContextDrafter()]

    one = drafting.combined(several, step_cost=0.01, memory={})

    assert isinstance(one, CompositeDrafter) and one.drafters == several and one.step_cost == 0.01


def test_several_drafters_with_nothing_to_combine_them_are_refused_in_words(monkeypatch):
    monkeypatch.setattr(drafting, "_combiner", None)

    with pytest.raises(ValueError, match="draftscope.drafters"):
        drafting.combined([ContextDrafter(), ContextDrafter()], step_cost=None, memory={})
