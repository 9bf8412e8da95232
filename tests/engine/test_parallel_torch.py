"""Several answers in one forward on torch (issue 33): each answer's slot is a row of a padded
batch, its own cache row, its own commits. In fp32 every answer stepping beside others is token
for token its solo answer, greedy and seeded T > 0, drafted or not; a forward that mixes up the
rows, or lets a node see what is not its ancestor, is caught; an answer that stops, is cancelled
or fails mid-batch leaves the others untouched."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from engine_fixtures import tiny_llama
from threaded_answers import (
    GREEDY,
    PROMPTS,
    SAMPLED,
    answer,
    ending_requests,
    fail_one_step_and_cancel,
    forwards_seen,
    ids_of,
    side_by_side,
)

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.engine.backends import torch_backend_for
from draftscope.engine.backends.base import chain_tree
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.backends.work import Prefill, Verify
from draftscope.engine.engine import Engine


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=3, sharpen=32.0, max_positions=1024)  # peaked: answers repeat


@pytest.fixture(scope="module")
def alone(model, tokenizer):
    engine = Engine(backend=TorchBackend(model, tokenizer, name="tiny"))
    engine.eos_ids = set()
    return engine


@pytest.fixture(scope="module")
def shared(model, tokenizer):
    engine = Engine(backend=torch_backend_for(model, tokenizer, slots=4, first_span=64))
    engine.eos_ids = set()
    return engine


def test_the_torch_backend_holds_as_many_answers_as_asked(shared, alone):
    assert isinstance(shared.backend, TorchSlotsBackend) and shared.slots.size == 4
    assert "4 answers at once" in shared.backend.describe()
    assert alone.slots.size == 1


def test_turning_the_server_on_reopens_a_torch_model_with_room_for_its_answers(shared, alone):
    """A torch model loaded with the server off holds one answer: serving needs it reopened with
    slots (it was never reopened, so the window's answers and the served ones waited for each other)."""
    from draftscope.core.runtime import Runtime
    from draftscope.storage import Settings

    serving = Settings(server_enabled=True, server_parallel=2)  # two served answers and the window's
    assert Runtime(Settings(), alone).needs_reload(serving), "one slot cannot hold three answers"
    assert not Runtime(Settings(), shared).needs_reload(serving), "four slots hold three answers"
    assert not Runtime(Settings(), alone).needs_reload(Settings(server_parallel=2)), "no server, no reload"


def test_on_cuda_one_served_answer_and_the_window_take_turns_on_the_captured_steps():
    from draftscope.engine.backends import answers_held

    assert answers_held("torch", "cuda:0", 2) == 1 and answers_held("torch", "cuda", 3) == 3
    assert answers_held("torch", "cpu", 2) == 2 and answers_held("llama.cpp", "cpu", 2) == 2


@torch.inference_mode()
def test_a_shared_forward_gives_each_row_its_solo_logits(model, tokenizer):
    """One forward with a prompt chunk, a chain and a branching tree of three slots: each row's
    logits are those of the answer alone on the dynamic cache."""
    backend = TorchSlotsBackend(model, tokenizer, slots=3, first_span=64)
    prompts = [ids_of(tokenizer, p) for p in PROMPTS[:3]]
    for slot in (0, 1):
        backend.decode_many({slot: Prefill(prompts[slot][:-1], 0)})
    branchy = DraftTree(
        np.array([60, 61, 62, 63], np.int64),
        np.array([-1, -1, 0, 1], np.int32),
        np.array([1, 1, 2, 2], np.int32),
        np.ones(4, np.float32),
        np.full(4, DraftSource.CONTEXT, np.int8),
    )
    out = backend.decode_many(
        {
            0: Verify(prompts[0][-1], chain_tree([50, 51, 52])),
            1: Verify(prompts[1][-1], branchy),
            2: Prefill(prompts[2][:20], 0),
        }
    )
    assert set(out) == {0, 1} and backend.slot_cached(2) == 20
    for slot, tree in ((0, chain_tree([50, 51, 52])), (1, branchy)):
        solo = TorchBackend(model, tokenizer)
        solo.start(prompts[slot])
        expected = solo.verify(prompts[slot][-1], tree).logits
        assert torch.allclose(out[slot].logits, expected, atol=1e-4), float((out[slot].logits - expected).abs().max())


@torch.inference_mode()
def test_rows_of_slots_that_are_not_consecutive_and_a_second_prompt_chunk_beside_trees(model, tokenizer):
    """Slots 0 and 3 verify while slot 1 reads the second chunk of its prompt in the same forward
    (rows 0, 1, 3 of four: not one block, so rows are gathered, not viewed): each row's logits are
    the answer's alone, and slot 1's cache then holds its whole prompt, as its solo answer's."""
    backend = TorchSlotsBackend(model, tokenizer, slots=4, first_span=64)
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    for slot in (0, 3):
        backend.decode_many({slot: Prefill(prompts[slot][:-1], 0)})
    backend.decode_many({1: Prefill(prompts[1][:5], 0)})  # slot 1: the first chunk alone
    branchy = DraftTree(
        np.array([60, 61, 62], np.int64),
        np.array([-1, -1, 0], np.int32),
        np.array([1, 1, 2], np.int32),
        np.ones(3, np.float32),
        np.full(3, DraftSource.CONTEXT, np.int8),
    )
    out = backend.decode_many(
        {
            0: Verify(prompts[0][-1], branchy),
            1: Prefill(prompts[1][5:-1], 5),
            3: Verify(prompts[3][-1], chain_tree([50, 51])),
        }
    )
    assert set(out) == {0, 3} and backend.slot_cached(1) == len(prompts[1]) - 1
    after = backend.decode_many({1: Verify(prompts[1][-1], chain_tree([40]))})
    for slot, tree, got in ((0, branchy, out[0]), (3, chain_tree([50, 51]), out[3]), (1, chain_tree([40]), after[1])):
        solo = TorchBackend(model, tokenizer)
        solo.start(prompts[slot])
        expected = solo.verify(prompts[slot][-1], tree).logits
        assert torch.allclose(got.logits, expected, atol=1e-4), (slot, float((got.logits - expected).abs().max()))


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "T0.9"])
def test_answers_side_by_side_are_each_their_solo_answer(alone, shared, tokenizer, params, count, monkeypatch):
    prompts = [ids_of(tokenizer, p) for p in PROMPTS[:count]]
    solo = [answer(alone, ids, p, drafted=False).token_ids for ids, p in zip(prompts, params)]
    sizes = forwards_seen(monkeypatch, TorchSlotsBackend)
    finals = side_by_side(shared, prompts, params[:count])
    assert all(f is not None and f.error is None for f in finals), finals
    assert max(sizes) == count, f"the answers' steps were not decoded together: {sizes[:40]}"
    accepted = [f.stats.accepted_by_source.get("context", 0) for f in finals]
    assert sum(accepted) > 0, f"drafts accepted per answer: {accepted}"
    assert [f.token_ids for f in finals] == solo  # fp32: token for token
    assert shared.slots.busy == 0


def test_a_forward_that_mixes_up_the_answers_rows_is_caught(alone, shared, tokenizer, monkeypatch):
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    solo = [answer(alone, ids, p, drafted=False).token_ids for ids, p in zip(prompts, SAMPLED)]
    decode = TorchSlotsBackend.decode_many

    def crossed(self, work):
        out = decode(self, work)
        slots = sorted(out)
        return {
            s: out[slots[(k + 1) % len(slots)]]
            if len(slots) > 1 and out[slots[(k + 1) % len(slots)]].logits.shape == out[s].logits.shape
            else out[s]
            for k, s in enumerate(slots)
        }

    monkeypatch.setattr(TorchSlotsBackend, "decode_many", crossed)
    finals = side_by_side(shared, prompts, SAMPLED, drafted=False)
    assert sum(f.token_ids != s for f, s in zip(finals, solo)) >= 2


def test_a_batch_that_lets_nodes_see_other_branches_is_caught(alone, shared, tokenizer, monkeypatch):
    """Padded rows are masked per row; a layout that lets every node see its whole step (siblings,
    cousins, padding) gives answers that are not the solo ones."""
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    solo = [answer(alone, ids, p, drafted=False).token_ids for ids, p in zip(prompts, GREEDY)]
    layout = TorchSlotsBackend._layout

    def leaky(self, slot, item):
        ids, positions, own = layout(self, slot, item)
        return ids, positions, np.ones_like(own) if isinstance(item, Verify) else own

    monkeypatch.setattr(TorchSlotsBackend, "_layout", leaky)
    finals = side_by_side(shared, prompts, GREEDY)
    assert [f.token_ids for f in finals] != solo


def test_an_answer_that_stops_is_cancelled_or_fails_leaves_the_others_untouched(alone, shared, tokenizer, monkeypatch):
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    solo = [answer(alone, ids, p, drafted=False).token_ids for ids, p in zip(prompts, SAMPLED)]
    stop_text = tokenizer.decode(solo[1][5:7])
    cancel = threading.Event()
    fail_one_step_and_cancel(monkeypatch, TorchSlotsBackend, cancel)
    finals = side_by_side(shared, prompts, SAMPLED, requests=ending_requests(prompts, stop_text, cancel))
    assert finals[2].finish_reason == "cancel" and finals[1].finish_reason in ("stop", "error")
    failed = [i for i, f in enumerate(finals) if f.finish_reason == "error"]
    assert len(failed) == 1 and "this answer's step failed" in finals[failed[0]].error
    for i, f in enumerate(finals):  # whatever its end, each answer is its solo answer as far as it went
        assert f.token_ids == solo[i][: len(f.token_ids)], i
    survivors = [i for i in range(4) if i not in failed and finals[i].finish_reason == "length"]
    assert survivors and all(finals[i].token_ids == solo[i] for i in survivors)
    assert shared.slots.busy == 0


@torch.inference_mode()
def test_a_slot_gives_the_prompt_s_last_hidden_state_as_the_answer_alone_does(model, tokenizer):
    """The recurrent drafter's first state: the hidden state at the prompt's last cached position."""
    prompt = ids_of(tokenizer, PROMPTS[0])
    solo = TorchBackend(model, tokenizer)
    expected = solo.start(prompt, want_hidden=True)
    backend = TorchSlotsBackend(model, tokenizer, slots=2)
    hidden = backend.start(prompt, want_hidden=True)
    assert hidden is not None and torch.allclose(hidden, expected, atol=1e-5)
    assert backend.start(prompt) is None
    # an answer's prompt in another slot, read in short chunks as beside others' steps: the last one's state
    at = backend.keep_prefix(1, prompt, want_hidden=True)
    prefix, hidden = prompt[:-1], None
    while at < len(prefix):
        chunk = prefix[at : at + 3]
        hidden = backend.decode_many({1: Prefill(chunk, at, want_hidden=at + len(chunk) == len(prefix))}).get(1)
        at += len(chunk)
    assert torch.allclose(hidden, expected, atol=1e-5)


def test_bad_slot_work_is_refused_in_words_and_the_rest_runs(model, tokenizer):
    backend = TorchSlotsBackend(model, tokenizer, slots=2)
    out = backend.decode_many({0: Prefill([5, 6, 7], 3), 1: Prefill([5, 6, 7], 0)})
    assert "slot 0 holds 0 positions; a prefill from 3 does not follow" in str(out[0])
    assert "a prefill chunk with no tokens" in str(backend.decode_many({0: Prefill([], 0)})[0])
    assert backend.slot_cached(1) == 3
    big = chain_tree(list(range(10, 80)))
    assert "a draft tree of 70 nodes; at most 64" in str(backend.decode_many({1: Verify(7, big)})[1])
    with pytest.raises(ValueError, match="at least 1"):
        TorchSlotsBackend(model, tokenizer, slots=0)
