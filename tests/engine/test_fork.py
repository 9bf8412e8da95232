"""n answers to one prompt (engine/fork.py), on torch's slots and on llama.cpp: each answer is the answer a
single request with its seed gives (sampled, drafting on), the prompt is read once (one answer reads it,
the others copy its cache), and while they all write every forward holds all n. A copy that is one token
off is caught; a backend that cannot copy slots, or holds one answer, answers the same, each answer
reading the prompt."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp
from threaded_answers import answer, ids_of, side_by_side

import draftscope.engine.stepper as stepper_module
from draftscope.drafters import ContextDrafter
from draftscope.engine.backends import torch_backend_for
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.backends.work import Prefill
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.fork import ForkedRequest, fork, seed_after
from draftscope.engine.sampling import SamplingParams

N = 3
SEED = 40
PROMPT = "blue fish swim in the sea blue fish swim in the sea blue fish swim in the"
SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=SEED)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=5, sharpen=16.0, max_positions=1024)  # peaked: drafts are accepted


class Engines(NamedTuple):
    kind: str
    alone: Engine  # one answer at a time: each choice's reference
    shared: Engine  # four answers at once
    backend_class: type


@pytest.fixture(scope="module", params=["torch", "llama.cpp"])
def engines(request, model, tokenizer, tmp_path_factory):
    if request.param == "torch":
        alone = Engine(backend=TorchBackend(model, tokenizer, name="tiny"))
        shared = Engine(backend=torch_backend_for(model, tokenizer, slots=4, first_span=64))
        backend_class: type = TorchSlotsBackend
    else:
        need_llama_cpp()
        from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

        path = write_tiny_gguf(
            tmp_path_factory.mktemp("fork") / "tiny-F32.gguf", model, request.getfixturevalue("tokenizer_dir")
        )
        alone = Engine(backend=LlamaCppBackend(path, tokenizer, context=256, slots=1))
        shared = Engine(backend=LlamaCppBackend(path, tokenizer, context=256, slots=4))
        backend_class = LlamaCppBackend
    for engine in (alone, shared):
        engine.eos_ids = set()  # every answer runs to its length
    yield Engines(request.param, alone, shared, backend_class)
    for engine in (alone, shared):
        engine.backend.close()


def choices(ids: list[int], params: SamplingParams = SAMPLED, n: int = N) -> list[ForkedRequest]:
    """n drafted answers of 40 tokens to ``ids``, each with drafters of its own."""
    requests = [
        GenerationRequest(prompt_ids=ids, max_new_tokens=40, sampling=params, drafters=[ContextDrafter()], budget=6)
        for _ in range(n)
    ]
    return fork(requests)


def prompt_tokens_read(monkeypatch, backend_class) -> list[int]:
    """The prompt tokens each of ``backend_class``'s forwards read (Prefill items)."""
    read: list[int] = []
    decode = backend_class.decode_many

    def counting(self, work):
        read.append(sum(len(item.tokens) for item in work.values() if isinstance(item, Prefill)))
        return decode(self, work)

    monkeypatch.setattr(backend_class, "decode_many", counting)
    return read


def assert_solo(engines: Engines, prompt, solo, got, params, what="") -> None:
    """``got`` is the answer alone: token for token in fp32 on torch; on llama.cpp up to a near-tie."""
    if engines.kind == "torch":
        assert got == solo, what
    else:
        assert_plain_or_near_tie(engines.alone, prompt, solo, got, params, what=what)


def forget_prompts(engine: Engine) -> None:
    """No slot holds any of a prompt from the tests before."""
    for slot in range(engine.backend.slots):
        engine.backend.clear_slot(slot)


def seeded(i: int) -> SamplingParams:
    return SamplingParams(temperature=SAMPLED.temperature, top_p=SAMPLED.top_p, seed=SEED + i)


def test_each_of_n_answers_is_its_seeds_answer_alone_and_the_prompt_is_read_once(engines, tokenizer, monkeypatch):
    ids = ids_of(tokenizer, PROMPT)
    solo = [answer(engines.alone, ids, seeded(i), drafted=False).token_ids for i in range(N)]
    assert len({tuple(s) for s in solo}) == N, "the seeds give different answers: the check can tell them apart"
    forget_prompts(engines.shared)
    read = prompt_tokens_read(monkeypatch, engines.backend_class)
    finals = side_by_side(engines.shared, [ids] * N, [SAMPLED] * N, requests=choices(ids))
    assert all(f is not None and f.error is None for f in finals), finals
    assert sum(read) == len(ids) - 1, f"prompt tokens read: {read}"  # all but its last: each answer's first root
    assert sorted(f.stats.prompt_tokens - f.stats.prompt_kept for f in finals) == [1] * (N - 1) + [len(ids)]
    assert [f.stats.seed for f in finals] == [SEED + i for i in range(N)]
    assert sum(f.stats.accepted_by_source.get("context", 0) for f in finals) > 0, "drafting was on, and drafts accepted"
    for i, f in enumerate(finals):
        assert len(f.token_ids) == 40
        assert_solo(engines, ids, solo[i], f.token_ids, seeded(i), what=f"answer {i}: ")


def test_while_they_all_write_every_forward_holds_all_n(engines, tokenizer, monkeypatch):
    """The n answers step together from their first step: one forward a round for all of them."""
    monkeypatch.setattr(stepper_module, "MAX_LEAD", 1000)  # no answer waits for its reader: rounds are the model's
    ids = ids_of(tokenizer, PROMPT)[:-2]
    sizes: list[int] = []
    decode = engines.backend_class.decode_many

    def counting(self, work):
        sizes.append(len(work))
        return decode(self, work)

    monkeypatch.setattr(engines.backend_class, "decode_many", counting)
    forget_prompts(engines.shared)
    finals = side_by_side(engines.shared, [ids] * N, [SAMPLED] * N, requests=choices(ids))
    shortest = min(f.stats.steps for f in finals)
    assert sizes[0] == 1 and sizes[1 : 1 + shortest] == [N] * shortest, sizes  # read once, then all n a forward
    assert all(f.stats.answers_per_forward >= N * shortest / f.stats.steps - 1e-9 for f in finals)


def test_a_copy_one_token_off_is_caught(engines, tokenizer, monkeypatch):
    """The check above is not blind: answers whose copied prompt differs from the prompt in one token
    (its last cached position) are not their seeds' answers."""
    ids = ids_of(tokenizer, PROMPT)
    solo = [answer(engines.alone, ids, seeded(i), drafted=False).token_ids for i in range(N)]
    copy = engines.backend_class.copy_slot

    def one_off(self, source, target, length):
        copy(self, source, target, length)
        wrong = (self.held_tokens(target)[-1] + 1) % self.vocab
        self.truncate_slot(target, length - 1)
        self.decode_many({target: Prefill([wrong], length - 1)})

    monkeypatch.setattr(engines.backend_class, "copy_slot", one_off)
    finals = side_by_side(engines.shared, [ids] * N, [SAMPLED] * N, requests=choices(ids))
    caught = 0
    for i, f in enumerate(finals):
        try:
            assert_solo(engines, ids, solo[i], f.token_ids, seeded(i))
        except AssertionError:
            caught += 1
    assert caught >= N - 1, "answers that read a prompt one token off passed as their seeds' answers"


def test_on_one_slot_the_answers_take_turns_each_its_seeds(engines, tokenizer):
    """One answer at a time: the next begins once the reader has ended, and reads the prompt itself."""
    ids = ids_of(tokenizer, PROMPT)
    alone = engines.alone
    solo = [answer(alone, ids, seeded(i), drafted=False).token_ids for i in range(2)]
    finals = side_by_side(alone, [ids] * 2, [SAMPLED] * 2, requests=choices(ids, n=2))
    assert [f.token_ids for f in finals] == solo


def test_a_backend_that_cannot_copy_reads_the_prompt_for_each(engines, tokenizer, monkeypatch):
    ids = ids_of(tokenizer, PROMPT)
    solo = [answer(engines.alone, ids, seeded(i), drafted=False).token_ids for i in range(N)]
    monkeypatch.setattr(engines.backend_class, "copies_slots", False)
    forget_prompts(engines.shared)
    read = prompt_tokens_read(monkeypatch, engines.backend_class)
    finals = side_by_side(engines.shared, [ids] * N, [SAMPLED] * N, requests=choices(ids))
    assert sum(read) == N * (len(ids) - 1)
    for i, f in enumerate(finals):
        assert_solo(engines, ids, solo[i], f.token_ids, seeded(i), what=f"answer {i}: ")


def test_seeds_follow_the_first_and_wrap_within_64_bits():
    top = 2**63 - 1
    requests = fork([GenerationRequest(prompt_ids=[1, 2], sampling=SamplingParams(temperature=1.0, seed=top))] * 3)
    assert [r.sampling.seed for r in requests] == [top, -(2**63), -(2**63) + 1]
    assert [r.index for r in requests] == [0, 1, 2] and len({id(r.fork) for r in requests}) == 1
    assert seed_after(5, 2) == 7
    unseeded = fork([GenerationRequest(prompt_ids=[1, 2], sampling=SamplingParams(temperature=1.0))] * 2)
    assert [r.sampling.seed for r in unseeded] == [None, None]  # each answer draws its own
