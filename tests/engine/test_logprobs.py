"""True logprobs (engine/logprobs.py): each said token's logprob is the model's own, the log_softmax of
its raw logits at that position, read from the verify rows that chose the tokens. So they are the same
with drafting on (one tree drafter, the conversation, a draft model, the answer itself: long accepted
paths) or off, greedy and sampled, and equal a plain forward over prompt + answer; the top alternatives
come sorted, the chosen token among them where it is likely enough. A verifier that reads the wrong
rows (a node's own instead of the one that chose it) is caught by the same test. On llama.cpp (the tiny
F32 GGUF of the same weights) drafting on or off agrees too. A token's bytes are its raw bytes, part of
a character where the tokenizer splits one."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import need_llama_cpp
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

import draftscope.engine.logprobs as logprobs_mod
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters import ContextDrafter, Drafter
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.drafters.oracle import OracleDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import step_from_dict
from draftscope.engine.logprobs import TokenBytes, token_text
from draftscope.engine.sampling import SamplingParams

PROMPT_TEXT = "def main():\n    print('hello world')\n" * 2
ANSWER = 20
TOP = 5
LLAMA_TOLERANCE = 2e-3
SAMPLINGS = {
    "greedy": SamplingParams(),
    "t1-topk": SamplingParams(temperature=1.0, top_k=40),
    "t0.7-topp-rep": SamplingParams(temperature=0.7, top_p=0.9, repetition_penalty=1.3),
}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=3, sharpen=6.0)


@pytest.fixture(scope="module")
def engine(model, tokenizer):
    engine = Engine(model, tokenizer)
    engine.eos_ids = set()  # a random model: answers run to their length
    return engine


@pytest.fixture(scope="module")
def prompt(tokenizer):
    return list(tokenizer(PROMPT_TEXT, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def draft_model(tokenizer):
    return tiny_llama(len(tokenizer), seed=4, layers=1, hidden=32, sharpen=6.0)


class RandomTree(Drafter):
    """A tree of random tokens, siblings at two levels: mostly rejected, so roots and bonus rows count."""

    name = "retrieval"
    source = DraftSource.RETRIEVAL

    def __init__(self, vocab: int, seed: int) -> None:
        self.vocab, self.rng = vocab, np.random.default_rng(seed)

    def reset(self, context_ids):
        pass

    def observe(self, ids):
        pass

    def propose(self, context_ids, budget):
        return DraftTree(
            self.rng.integers(0, self.vocab, 6).astype(np.int64),
            np.array([-1, -1, 0, 0, 1, 2], np.int32),
            np.array([1, 1, 2, 2, 2, 3], np.int32),
            np.ones(6, np.float32),
            np.full(6, DraftSource.RETRIEVAL, np.int8),
        )


def mixes(plain_ids, prompt, vocab, draft_model) -> dict:
    """Drafter mixes, each fresh; the oracle drafts the plain answer itself, so whole chains are accepted."""
    return {
        "tree": lambda: [RandomTree(vocab, 1)],
        "context": lambda: [ContextDrafter(min_suffix=1)],
        "model": lambda: [ModelDrafter(draft_model, max_tokens=3)],
        "oracle": lambda: [OracleDrafter(plain_ids, len(prompt), max_depth=5)],
        "oracle+tree+context": lambda: [
            OracleDrafter(plain_ids, len(prompt), max_depth=5),
            RandomTree(vocab, 2),
            ContextDrafter(min_suffix=1),
        ],
    }


def generate(engine, prompt, params, drafters=(), *, top=TOP, budget=8, tokens=ANSWER):
    events = list(
        engine.generate(
            GenerationRequest(
                prompt_ids=prompt,
                max_new_tokens=tokens,
                sampling=params,
                drafters=list(drafters),
                budget=budget if drafters else None,
                logprobs=top,
            )
        )
    )
    final = events[-1]
    assert final.error is None, final.error
    return final, events[:-1]


def reference(model, prompt, answer) -> torch.Tensor:
    """The log_softmax of a plain forward over prompt + answer, at the rows that predict the answer."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + answer])).logits[0].float()
    return torch.log_softmax(logits, -1)[len(prompt) - 1 : len(prompt) - 1 + len(answer)]


def assert_same_logprobs(got, want, *, tol=1e-5):
    assert [e.token for e in got] == [e.token for e in want]
    assert [e.logprob for e in got] == pytest.approx([e.logprob for e in want], abs=tol)
    for g, w in zip(got, want):
        assert [t for t, _ in g.top] == [t for t, _ in w.top]
        assert [lp for _, lp in g.top] == pytest.approx([lp for _, lp in w.top], abs=tol)


@pytest.mark.parametrize("sampling", list(SAMPLINGS))
def test_logprobs_are_the_raw_log_softmax_of_a_plain_forward(engine, model, prompt, sampling):
    """Before temperature, top-k, top-p and the penalty: the model's own distribution at each position."""
    final, steps = generate(engine, prompt, dataclasses.replace(SAMPLINGS[sampling], seed=7))
    ref = reference(model, prompt, final.token_ids)
    assert [e.token for e in final.logprobs] == final.token_ids
    want = ref.gather(-1, torch.tensor(final.token_ids)[:, None]).squeeze(-1).tolist()
    assert [e.logprob for e in final.logprobs] == pytest.approx(want, abs=1e-4)
    values, ids = ref.topk(TOP, -1)
    for k, entry in enumerate(final.logprobs):
        assert [t for t, _ in entry.top] == ids[k].tolist()
        assert [lp for _, lp in entry.top] == pytest.approx(values[k].tolist(), abs=1e-4)
    assert [e for ev in steps for e in ev.logprobs] == final.logprobs, "the steps' logprobs make the answer's"


@pytest.mark.parametrize("sampling", list(SAMPLINGS))
@pytest.mark.parametrize("mix", ["tree", "context", "model", "oracle", "oracle+tree+context"])
def test_logprobs_are_the_same_with_drafting_on_or_off(engine, prompt, draft_model, sampling, mix):
    vocab = len(engine.tokenizer)
    accepted = 0
    for seed in (3, 11):
        params = dataclasses.replace(SAMPLINGS[sampling], seed=seed)
        plain, _ = generate(engine, prompt, params)
        make = mixes(plain.token_ids, prompt, vocab, None if mix != "model" else draft_model)[mix]
        drafted, steps = generate(engine, prompt, params, make())
        assert drafted.token_ids == plain.token_ids
        assert_same_logprobs(drafted.logprobs, plain.logprobs)
        accepted += sum(ev.accepted for ev in steps)
    if mix.startswith("oracle"):
        assert accepted >= ANSWER, "long accepted paths: every row of a path read"


def test_a_verifier_reading_the_wrong_rows_is_caught(engine, prompt, monkeypatch):
    """The rows of the accepted nodes themselves (each one a token too late) differ from plain decoding's."""
    vocab = len(engine.tokenizer)
    params = SamplingParams(temperature=1.0, seed=5)
    plain, _ = generate(engine, prompt, params)
    own_rows = lambda path, count: ([1 + p for p in path] + [0] * count)[:count]  # noqa: E731
    monkeypatch.setattr(logprobs_mod, "said_rows", own_rows)
    drafted, _ = generate(engine, prompt, params, mixes(plain.token_ids, prompt, vocab, None)["oracle"]())
    assert drafted.token_ids == plain.token_ids
    with pytest.raises(AssertionError):
        assert_same_logprobs(drafted.logprobs, plain.logprobs)


def test_top_logprobs_are_sorted_and_hold_the_chosen_token_when_likely(engine, prompt):
    final, _ = generate(engine, prompt, SamplingParams(temperature=1.0, seed=2), top=20)
    inside = 0
    for entry in final.logprobs:
        values = [lp for _, lp in entry.top]
        assert len(entry.top) == 20 and values == sorted(values, reverse=True)
        assert entry.logprob <= values[0] + 1e-6
        listed = dict(entry.top)
        if entry.logprob >= values[-1] + 1e-5:  # above the 20th: it must be listed, with its own logprob
            assert listed[entry.token] == pytest.approx(entry.logprob, abs=1e-6)
            inside += 1
    assert inside > 0
    greedy, _ = generate(engine, prompt, SamplingParams(), top=1)
    assert all(e.top[0][0] == e.token for e in greedy.logprobs), "greedy: the chosen token is the most likely"


def test_an_answer_that_does_not_ask_gets_none_and_zero_top_gets_the_chosen_only(engine, prompt):
    final, steps = generate(engine, prompt, SamplingParams(), top=None, tokens=4)
    assert final.logprobs is None and all(ev.logprobs is None for ev in steps)
    final, _ = generate(engine, prompt, SamplingParams(), top=0, tokens=4)
    assert len(final.logprobs) == 4 and all(e.top == [] for e in final.logprobs)


def test_an_end_of_sequence_token_gets_no_logprob_and_steps_replay_theirs(model, tokenizer, prompt):
    """The end token's text is no part of the answer; stored steps read back with their logprobs."""
    engine = Engine(model, tokenizer)
    engine.eos_ids = set()
    final, steps = generate(engine, prompt, SamplingParams(temperature=1.0, seed=1), tokens=30)
    at = next(k for k, t in enumerate(final.token_ids) if k >= 3 and t not in final.token_ids[:k])
    engine.eos_ids = {final.token_ids[at]}  # a token of the answer is its end
    ended, steps = generate(engine, prompt, SamplingParams(temperature=1.0, seed=1), tokens=30)
    assert ended.finish_reason == "eos" and ended.token_ids == final.token_ids[: at + 1]
    assert ended.logprobs == final.logprobs[:at]
    stored = [step_from_dict(json.loads(json.dumps(dataclasses.asdict(ev)))) for ev in steps]
    assert [s.logprobs for s in stored] == [ev.logprobs for ev in steps]
    damaged = step_from_dict({"token_ids": [5], "logprobs": [{"token": "x"}]})
    assert damaged.token_ids == [5] and damaged.logprobs is None, "a damaged file's step replays without them"


def test_llama_cpp_logprobs_are_the_same_with_drafting_on_or_off(model, tokenizer, tokenizer_dir, prompt, tmp_path):
    need_llama_cpp()
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(write_tiny_gguf(tmp_path / "tiny-F32.gguf", model, tokenizer_dir), tokenizer, threads=1)
    try:
        engine = Engine(backend=backend)
        engine.eos_ids = set()
        for params in (SamplingParams(), SamplingParams(temperature=1.0, seed=4)):
            plain, _ = generate(engine, prompt, params)
            oracle = OracleDrafter(plain.token_ids, len(prompt), max_depth=5)
            drafted, _ = generate(engine, prompt, params, [oracle, ContextDrafter(min_suffix=1)])
            assert drafted.token_ids == plain.token_ids
            # llama.cpp keeps its cache in f16 and sums a batch of rows in another order than one row: the
            # logits of a tree's row and a plain step's differ in the fourth digit (the tokens do not)
            assert_same_logprobs(drafted.logprobs, plain.logprobs, tol=LLAMA_TOLERANCE)
            ref = reference(model, prompt, plain.token_ids)
            want = ref.gather(-1, torch.tensor(plain.token_ids)[:, None]).squeeze(-1).tolist()
            assert [e.logprob for e in plain.logprobs] == pytest.approx(want, abs=LLAMA_TOLERANCE), "torch's"
    finally:
        backend.close()


def test_a_tokens_bytes_are_its_raw_bytes(tokenizer):
    """Byte-level BPE: a character the tokenizer splits gives each token its raw part, shown as bytes:."""
    reader = TokenBytes(tokenizer)
    for text in ("héllo € wörld", "print('hello')"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        parts = reader(ids)
        assert b"".join(parts) == text.encode()
    euro = reader(tokenizer("€", add_special_tokens=False)["input_ids"])
    assert len(euro) > 1 and token_text(euro[0]).startswith("bytes:\\xe2")
    assert reader([tokenizer.convert_tokens_to_ids("<|im_end|>")]) == [b"<|im_end|>"]


def test_a_sentencepiece_tokens_bytes(tmp_path):
    """SentencePiece's "▁" is a space and its byte fallback ``<0xNN>`` one byte."""
    vocab = {"<unk>": 0, "▁hi": 1, "<0xE2>": 2, "<0x82>": 3, "<0xAC>": 4, "!": 5}
    spm = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    spm.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    reader = TokenBytes(PreTrainedTokenizerFast(tokenizer_object=spm, unk_token="<unk>"))
    assert reader([1, 2, 3, 4, 5]) == [b" hi", b"\xe2", b"\x82", b"\xac", b"!"]
