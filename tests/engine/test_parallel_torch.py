"""Several answers in one forward on torch (issue 33), what is torch's own: each answer's slot is a
row of a padded batch, masked per row, so a layout that lets a node see what is not its ancestor
is caught; a slot gives the prompt's last hidden state. What every backend shares (each slot's rows
are its answer's alone, the slot verbs, answers side by side, stop, cancel and failure) is
test_backend_contract.py's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_fixtures import tiny_llama
from threaded_answers import GREEDY, PROMPTS, answer, ids_of, side_by_side

from draftscope.engine.backends import torch_backend_for
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
    assert isinstance(shared.backend, TorchSlotsBackend) and shared.stepper.size == 4
    assert "4 answers at once" in shared.backend.describe()
    assert alone.stepper.size == 1


def test_on_cuda_one_served_answer_and_the_window_take_turns_on_the_captured_steps():
    from draftscope.engine.backends import answers_held

    assert answers_held("torch", "cuda:0", 2) == 1 and answers_held("torch", "cuda", 3) == 3
    assert answers_held("torch", "cpu", 2) == 2 and answers_held("llama.cpp", "cpu", 2) == 2


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


def test_an_empty_chunk_and_no_slots_are_refused_in_words(model, tokenizer):
    """Beside the contract's refusals (test_backend_contract.py), torch's own."""
    backend = TorchSlotsBackend(model, tokenizer, slots=2)
    assert "a prefill chunk with no tokens" in str(backend.decode_many({0: Prefill([], 0)})[0])
    with pytest.raises(ValueError, match="at least 1"):
        TorchSlotsBackend(model, tokenizer, slots=0)
