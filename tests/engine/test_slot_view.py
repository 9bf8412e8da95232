"""One slot of a backend driven as one answer (base.SlotView): what the draft model, the cost
measurement, the self-test and the graph capture's check use, whichever backend runs. A view of one
slot of several gives the logits the one-answer backend gives, and leaves the other slots alone."""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import tiny_llama

from draftscope.draft_tree import chain_tree
from draftscope.engine.backends.base import SlotView
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.backends.work import Prefill
from draftscope.engine.budget import measure_verify_costs

pytestmark = pytest.mark.usefixtures("one_thread")

V = 64
PROMPT = [5, 9, 14, 3, 22, 7, 31, 2, 11]
OTHER = [1, 2, 3, 4, 5]  # another conversation, in slot 0


@pytest.fixture(scope="module")
def model():
    return tiny_llama(V, seed=1).eval()


def one_answer_logits(model) -> torch.Tensor:
    alone = TorchBackend(model, None)
    alone.start(PROMPT)
    return alone.verify(PROMPT[-1], chain_tree([4, 5, 6])).logits


def test_a_view_of_one_slot_of_several_answers_as_the_one_answer_backend_does(model):
    slots = TorchSlotsBackend(model, None, slots=2)
    slots.start(OTHER)  # slot 0's own verbs are its view
    view = SlotView(slots, 1)

    view.start(PROMPT)
    logits = view.verify(PROMPT[-1], chain_tree([4, 5, 6])).logits
    view.commit([0, 1])

    torch.testing.assert_close(logits, one_answer_logits(model), rtol=1e-4, atol=1e-4)
    assert view.cached == len(PROMPT) - 1 + 3, "the root and two accepted nodes kept"
    assert slots.held_tokens(1) == PROMPT[:-1] + [PROMPT[-1], 4, 5]
    assert slots.held_tokens(0) == OTHER[:-1], "the other slot untouched"


def test_an_answer_measures_verify_costs_in_its_own_slot(model):
    slots = TorchSlotsBackend(model, None, slots=2)
    slots.start(OTHER)

    costs = measure_verify_costs(SlotView(slots, 1), context=16, sizes=(0, 1, 2), repeats=1)

    assert sorted(costs) == [0, 1, 2] and all(seconds > 0 for seconds in costs.values())
    assert slots.held_tokens(0) == OTHER[:-1], "the answer in slot 0 keeps its cache"


def test_a_one_answer_backend_reads_a_prompt_in_parts_as_it_reads_it_whole(model):
    parts = TorchBackend(model, None)
    kept = parts.keep_prefix(0, PROMPT)
    first = parts.decode_many({0: Prefill(PROMPT[:4], kept)})
    second = parts.decode_many({0: Prefill(PROMPT[4:-1], 4)})

    assert first == {0: None} and second == {0: None}
    logits = parts.verify(PROMPT[-1], chain_tree([4, 5, 6])).logits
    torch.testing.assert_close(logits, one_answer_logits(model), rtol=1e-4, atol=1e-4)


def test_a_prompt_part_that_does_not_follow_the_cache_is_refused_in_words(model):
    backend = TorchBackend(model, None)
    backend.start(PROMPT)

    out = backend.decode_many({0: Prefill([3, 4], len(PROMPT) + 5)})

    assert isinstance(out[0], ValueError) and "does not follow" in str(out[0])
    assert backend.cached == len(PROMPT) - 1, "the cache as it was"
