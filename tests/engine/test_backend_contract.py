"""One contract, every backend: torch's slots, llama.cpp and llama.cpp in a child process (the one
RPC workers run under) keep it alike, on the same tiny fp32 model.

- decode_many: a slot's rows are the logits it gets alone, whatever the other slots do in the
  same forward (a tree, a chain, a prompt's next chunk, in slots that are not consecutive); each
  tree node's row is its path's, read as a chain; work a slot cannot take is refused in words and
  the rest runs.
- the slot verbs: commit_slot keeps the root and the accepted path, truncate_slot forgets what came
  after, keep_prefix keeps what a slot shares with the next prompt; held_tokens says what is held.
- the engine on a slotted backend: answers side by side are each the answer alone (token for token
  in fp32 on torch; on llama.cpp up to a near-tie that batch shape moved), and that check catches
  rows handed to the wrong answer; an answer that stops, is cancelled or fails leaves the others
  as they were; turning the server on reopens a one-answer model with room for its answers.
"""

from __future__ import annotations

import re
import threading
from typing import NamedTuple

import numpy as np
import pytest
import torch
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp
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

from draftscope.draft_tree import DraftSource, DraftTree, chain_tree
from draftscope.engine.backends import torch_backend_for
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.backends.work import Prefill, Verify
from draftscope.engine.engine import Engine

CHILD = "llama.cpp in a child"
# Of the largest logit: llama.cpp sums in another order for another batch shape (measured: 2e-4 of
# this peaked model's logits, whose largest are ~15); fp32 torch gives the same sums to 1e-6
TOLERANCE = {"torch": 1e-5, "llama.cpp": 5e-4, CHILD: 5e-4}
FREE = 2  # the slot the tests below leave to "alone" (answers' own slots: 0, 1 and 3)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=3, sharpen=32.0, max_positions=1024)  # peaked: answers repeat


@pytest.fixture(scope="module")
def gguf(model, tokenizer_dir, tmp_path_factory):
    need_llama_cpp()
    return write_tiny_gguf(tmp_path_factory.mktemp("contract") / "tiny-F32.gguf", model, tokenizer_dir)


def open_slots(kind: str, model, tokenizer, request):
    """A backend of ``kind`` holding four answers."""
    if kind == "torch":
        return TorchSlotsBackend(model, tokenizer, slots=4, first_span=64)
    path = request.getfixturevalue("gguf")
    from draftscope.engine.backends.llama.isolated import IsolatedLlamaBackend
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

    opener = LlamaCppBackend if kind == "llama.cpp" else IsolatedLlamaBackend
    return opener(path, tokenizer, context=256, threads=1, slots=4)


@pytest.fixture(scope="module", params=["torch", "llama.cpp", CHILD])
def slots(request, model, tokenizer):
    backend = open_slots(request.param, model, tokenizer, request)
    yield request.param, backend
    backend.close()


def a_tree():
    """12 nodes, 5 leaves, depth 4: branches at the root and below."""
    parents = [-1, -1, -1, 0, 0, 1, 3, 3, 4, 6, 6, 7]
    depth = [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    return tree_of([40 + 7 * i for i in range(12)], parents, depth)


def tree_of(tokens, parents, depth) -> DraftTree:
    n = len(tokens)
    return DraftTree(
        np.array(tokens, np.int64),
        np.array(parents, np.int32),
        np.array(depth, np.int32),
        np.ones(n, np.float32),
        np.full(n, DraftSource.CONTEXT, np.int8),
    )


def read(backend, slot: int, ids: list[int]) -> None:
    """``ids`` read into ``slot`` from empty."""
    backend.clear_slot(slot)
    backend.decode_many({slot: Prefill(ids, 0)})
    assert backend.slot_cached(slot) == len(ids)


def rows(out: dict, slot: int) -> torch.Tensor:
    """The slot's rows as a tensor, to compare across backends (llama.cpp's are NumPy's: no torch there)."""
    got = out[slot]
    assert not isinstance(got, Exception), f"slot {slot}: {got}"
    return torch.as_tensor(got.logits)


def alone(backend, ids: list[int], tree: DraftTree | None = None) -> torch.Tensor:
    """The rows of ``ids[-1]`` and ``tree`` (none: a plain step) verified after ``ids[:-1]``, in a
    slot of their own."""
    read(backend, FREE, ids[:-1])
    got = rows(backend.decode_many({FREE: Verify(ids[-1], tree or DraftTree.empty())}), FREE)
    backend.clear_slot(FREE)
    return got


def assert_close(kind: str, got, want, what="") -> None:
    worst, allowed = float((got - want).abs().max()), TOLERANCE[kind] * float(want.abs().max())
    assert worst <= allowed, f"{kind}{what}: logits {worst:.2g} apart, at most {allowed:.2g}"


# ---------------------------------------------------------------- decode_many


@torch.inference_mode()
def test_a_shared_forward_gives_each_slot_the_logits_it_has_alone(slots, tokenizer):
    """Slots 0 and 3 verify while slot 1 reads its prompt's second chunk in the same forward (rows
    that are not one block): each verify's rows are its answer's alone, and slot 1 then holds its
    prompt and verifies as it would alone."""
    kind, backend = slots
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    for slot in (0, 3):
        read(backend, slot, prompts[slot][:-1])
    read(backend, 1, prompts[1][:5])
    branchy = tree_of([60, 61, 62, 63], [-1, -1, 0, 1], [1, 1, 2, 2])
    trees = {0: branchy, 3: chain_tree([50, 51, 52]), 1: chain_tree([40])}
    out = backend.decode_many(
        {0: Verify(prompts[0][-1], trees[0]), 1: Prefill(prompts[1][5:-1], 5), 3: Verify(prompts[3][-1], trees[3])}
    )
    assert set(out) == {0, 3} and backend.slot_cached(1) == len(prompts[1]) - 1
    out.update(backend.decode_many({1: Verify(prompts[1][-1], trees[1])}))
    for slot, tree in trees.items():
        got = rows(out, slot)
        assert got.shape == (len(tree) + 1, backend.vocab)
        assert_close(kind, got, alone(backend, prompts[slot], tree), f" slot {slot}")


@torch.inference_mode()
def test_each_tree_node_gets_the_logits_of_its_path_read_as_a_chain(slots, tokenizer):
    kind, backend = slots
    ids = ids_of(tokenizer, PROMPTS[1])
    tree = a_tree()
    read(backend, 0, ids[:-1])
    got = rows(backend.decode_many({0: Verify(ids[-1], tree)}), 0)
    for node in [-1, *range(len(tree))]:
        path = tree.token_path(node) if node >= 0 else []
        assert_close(kind, got[node + 1], alone(backend, ids + path)[0], f" node {node}")
    assert not torch.allclose(got[1], got[2], atol=1e-3)  # another path, other logits: the check can fail


def test_work_a_slot_cannot_take_is_refused_in_words_and_the_rest_runs(slots):
    kind, backend = slots
    for slot in (0, 1):
        backend.clear_slot(slot)
    out = backend.decode_many({0: Prefill([5, 6, 7], 3), 1: Prefill([5, 6, 7], 0)})
    assert "slot 0 holds 0 positions; a prefill from 3 does not follow" in str(out[0])
    assert backend.slot_cached(0) == 0 and backend.slot_cached(1) == 3
    refused = backend.decode_many({1: Verify(7, chain_tree(list(range(10, 1010))))})[1]
    assert isinstance(refused, ValueError) and re.search(r"a draft tree of 1000 nodes; at most \d+", str(refused))
    assert rows(backend.decode_many({1: Verify(7, chain_tree([8]))}), 1).shape[0] == 2  # the slot goes on


# ---------------------------------------------------------------- the slot verbs


@torch.inference_mode()
@pytest.mark.parametrize("accepted", [[], [1, 5], [0, 3, 6, 9]])
def test_commit_slot_keeps_the_root_and_the_accepted_path_only(slots, tokenizer, accepted):
    kind, backend = slots
    ids = ids_of(tokenizer, PROMPTS[2])
    tree = a_tree()
    read(backend, 1, ids[:-1])
    backend.decode_many({1: Verify(ids[-1], tree)})
    backend.commit_slot(1, accepted)
    kept = ids + [int(tree.tokens[i]) for i in accepted]
    assert backend.slot_cached(1) == len(kept) and backend.held_tokens(1) == kept
    after = rows(backend.decode_many({1: Verify(99, chain_tree([101, 102]))}), 1)
    assert_close(kind, after[0], alone(backend, kept + [99])[0])
    assert_close(kind, after[-1], alone(backend, kept + [99, 101, 102])[0])


@torch.inference_mode()
def test_truncate_slot_forgets_what_came_after(slots, tokenizer):
    kind, backend = slots
    ids = ids_of(tokenizer, PROMPTS[0])
    read(backend, 1, ids[:-1])
    backend.decode_many({1: Verify(ids[-1], chain_tree([50, 51, 52]))})
    backend.commit_slot(1, [0, 1, 2])
    backend.truncate_slot(1, len(ids) - 1)
    assert backend.slot_cached(1) == len(ids) - 1 and backend.held_tokens(1) == ids[:-1]
    again = rows(backend.decode_many({1: Verify(ids[-1], DraftTree.empty())}), 1)
    assert_close(kind, again[0], alone(backend, ids)[0])


@torch.inference_mode()
def test_keep_prefix_keeps_what_the_slot_shares_with_the_next_prompt(slots, tokenizer):
    """A follow-up reads only what is new: the slot keeps the shared start, and the rest read after
    it verifies as the whole prompt read alone."""
    kind, backend = slots
    ids = ids_of(tokenizer, PROMPTS[3])
    read(backend, 1, ids)
    follow = ids[:6] + ids_of(tokenizer, " and the dog sat on the rug")
    kept = backend.keep_prefix(1, follow)
    assert kept == 6 and backend.slot_cached(1) == 6 and backend.held_tokens(1) == follow[:6]
    backend.decode_many({1: Prefill(follow[6:-1], 6)})
    got = rows(backend.decode_many({1: Verify(follow[-1], DraftTree.empty())}), 1)
    assert_close(kind, got[0], alone(backend, follow)[0])


@torch.inference_mode()
def test_copy_slot_gives_another_slot_the_prefix_and_each_goes_on_alone(slots, tokenizer):
    """n answers to one prompt read it once (engine/fork.py): a slot that held another conversation
    gets the first slot's prompt, then each verifies and commits its own tree as if it had read it
    alone; what one commits never reaches the other."""
    kind, backend = slots
    ids, other = ids_of(tokenizer, PROMPTS[0]), ids_of(tokenizer, PROMPTS[1])
    assert backend.copies_slots
    read(backend, 1, ids[:-1])
    backend.decode_many({1: Verify(ids[-1], chain_tree([50, 51]))})
    backend.commit_slot(1, [0, 1])  # the source has gone on past the prompt: only its first positions are copied
    read(backend, 3, other)
    backend.copy_slot(1, 3, len(ids) - 1)
    assert backend.slot_cached(3) == len(ids) - 1 and backend.held_tokens(3) == ids[:-1]
    assert backend.held_tokens(1) == ids + [50, 51]
    out = backend.decode_many({1: Verify(52, chain_tree([53])), 3: Verify(ids[-1], chain_tree([60, 61]))})
    assert_close(kind, rows(out, 3), alone(backend, ids, chain_tree([60, 61])), " the copy")
    assert_close(kind, rows(out, 1)[-1], alone(backend, ids + [50, 51, 52, 53])[0], " the source")
    backend.commit_slot(3, [0])
    backend.commit_slot(1, [])
    got = rows(backend.decode_many({3: Verify(70, DraftTree.empty()), 1: Verify(71, DraftTree.empty())}), 3)
    assert_close(kind, got[0], alone(backend, ids + [60, 70])[0], " the copy after its commit")
    refused = pytest.raises(ValueError, match="cannot be copied")
    with refused:
        backend.copy_slot(3, 0, backend.slot_cached(3) + 1)


# ---------------------------------------------------------------- the engine on slots


class Engines(NamedTuple):
    kind: str
    alone: Engine  # one answer at a time: the reference
    shared: Engine  # four answers at once
    backend_class: type


@pytest.fixture(scope="module", params=["torch", "llama.cpp"])
def engines(request, model, tokenizer):
    if request.param == "torch":
        alone = Engine(backend=TorchBackend(model, tokenizer, name="tiny"))
        shared = Engine(backend=torch_backend_for(model, tokenizer, slots=4, first_span=64))
        backend_class = TorchSlotsBackend
    else:
        from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

        path = request.getfixturevalue("gguf")  # opened as open_backend would, less its file check's child
        alone = Engine(backend=LlamaCppBackend(path, tokenizer, context=256, slots=1))
        shared = Engine(backend=LlamaCppBackend(path, tokenizer, context=256, slots=4))
        backend_class = LlamaCppBackend
    for engine in (alone, shared):
        engine.eos_ids = set()  # every answer runs to its length
    yield Engines(request.param, alone, shared, backend_class)
    for engine in (alone, shared):
        engine.backend.close()


def assert_solo(engines: Engines, prompt, solo, got, params, what="") -> None:
    """``got`` is the answer alone: token for token in fp32 on torch; on llama.cpp up to a near-tie."""
    if engines.kind == "torch":
        assert got == solo, what
    else:
        assert_plain_or_near_tie(engines.alone, prompt, solo, got, params, what=what)


def solo_answers(engines: Engines, prompts, params) -> list[list[int]]:
    return [answer(engines.alone, ids, p, drafted=False).token_ids for ids, p in zip(prompts, params)]


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "T0.9"])
def test_answers_side_by_side_are_each_the_answer_alone(engines, tokenizer, params, monkeypatch):
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    solo = solo_answers(engines, prompts, params)
    sizes = forwards_seen(monkeypatch, engines.backend_class)
    finals = side_by_side(engines.shared, prompts, params)
    assert all(f is not None and f.error is None for f in finals), finals
    assert max(sizes) >= 3, f"the answers' steps were not decoded together: {sizes[:40]}"
    accepted = [f.stats.accepted_by_source.get("context", 0) for f in finals]
    # greedy answers of this model repeat themselves, each; sampled ones less, together still
    assert (min(accepted) if params is GREEDY else sum(accepted)) > 0, f"drafts accepted per answer: {accepted}"
    for i, f in enumerate(finals):
        assert len(f.token_ids) == 40
        assert_solo(engines, prompts[i], solo[i], f.token_ids, params[i], what=f"answer {i}: ")
    assert engines.shared.stepper.busy == 0


def test_a_forward_that_mixes_up_the_answers_rows_is_caught(engines, tokenizer, monkeypatch):
    """The check above is not blind: logits handed to the wrong answer make answers that are not
    the answers alone, and it says so."""
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    solo = solo_answers(engines, prompts, SAMPLED)
    decode = engines.backend_class.decode_many

    def crossed(self, work):
        out = decode(self, work)
        order = sorted(out)
        swapped = {s: out[order[(k + 1) % len(order)]] for k, s in enumerate(order)}
        return {
            s: swapped[s] if len(order) > 1 and swapped[s].logits.shape == out[s].logits.shape else out[s] for s in out
        }

    monkeypatch.setattr(engines.backend_class, "decode_many", crossed)
    finals = side_by_side(engines.shared, prompts, SAMPLED, drafted=False)
    caught = 0
    for i, f in enumerate(finals):
        try:
            assert_solo(engines, prompts[i], solo[i], f.token_ids, SAMPLED[i])
        except AssertionError:
            caught += 1
    assert caught >= 2, "answers decoded with another answer's logits passed as the answers alone"


def test_an_answer_that_stops_is_cancelled_or_fails_leaves_the_others_untouched(engines, tokenizer, monkeypatch):
    prompts = [ids_of(tokenizer, p) for p in PROMPTS]
    solo = solo_answers(engines, prompts, SAMPLED)
    stop_text = tokenizer.decode(solo[1][5:7])  # answer 1 stops at a string it writes early
    cancel = threading.Event()
    fail_one_step_and_cancel(monkeypatch, engines.backend_class, cancel)
    finals = side_by_side(engines.shared, prompts, SAMPLED, requests=ending_requests(prompts, stop_text, cancel))
    assert finals[2].finish_reason == "cancel" and finals[1].finish_reason in ("stop", "error")
    failed = [i for i, f in enumerate(finals) if f.finish_reason == "error"]
    assert len(failed) == 1 and "this answer's step failed" in finals[failed[0]].error, [f.error for f in finals]
    for i, f in enumerate(finals):  # whatever its end, each answer is its answer alone as far as it went
        assert_solo(engines, prompts[i], solo[i][: len(f.token_ids)], f.token_ids, SAMPLED[i], what=f"answer {i}: ")
    survivors = [i for i in range(4) if i not in failed and finals[i].finish_reason == "length"]
    assert survivors and all(len(finals[i].token_ids) == 40 for i in survivors)
    assert engines.shared.stepper.busy == 0


def test_turning_the_server_on_reopens_a_model_with_room_for_its_answers(engines):
    """A model loaded with the server off holds one answer: serving needs it reopened with slots."""
    from draftscope.core.runtime import Runtime
    from draftscope.storage import Settings

    alone, shared = engines.alone, engines.shared
    serving = Settings(server_enabled=True, server_parallel=2)  # two served answers and the window's
    assert Runtime(Settings(), alone).needs_reload(serving), "one slot cannot hold three answers"
    assert not Runtime(Settings(), shared).needs_reload(serving), "four slots hold three answers"
    assert not Runtime(Settings(), alone).needs_reload(Settings(server_parallel=2)), "no server, no reload"
