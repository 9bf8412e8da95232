"""A read ahead (issue 61: a background answer that reads the prompt before Send) has the lowest
priority on the stepper, and what it read is the answer's when Send comes.

An answer that arrives during a long read ahead starts at the next round (counted in forwards, never
seconds); the read ahead ends as a cancel with what it read kept in the slot, and the answer reads
only the rest. Typing more reads only the new tokens; an edit reads from the edit. The answer after a
read ahead is the cold read's: token-identical on fp32 torch, greedy and seeded; on llama.cpp equal or
diverging only at a measured near-tie, with only the new part prefilled. A read ahead trusted to have
read one token more than it did is caught by the same comparison. The answer's figures say how much
was read ahead (and restored from disk), in words too."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from engine_fixtures import IdTokenizer, tiny_llama
from test_prompt_cache import Fed, Prefilled, open_torch
from test_stepper import TimedSlots, engine_on

import draftscope.engine.backends.held as held_mod
from draftscope.drafters import ContextDrafter
from draftscope.engine.answer import AHEAD_CHUNK, READ_CHUNK
from draftscope.engine.backends.held import HeldTokens, KeepsPrefixes
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.backends.work import PREFILL_BATCH, Prefill
from draftscope.engine.cache_prefix import common_prefix
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import FinalEvent, ReadingEvent
from draftscope.engine.sampling import SamplingParams

V = 96
SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=7)
PARAMS = pytest.mark.parametrize("params", [SamplingParams(), SAMPLED], ids=["greedy", "seeded"])


@pytest.fixture(scope="module")
def model():
    return tiny_llama(V, seed=5, sharpen=6.0, max_positions=1400)


def tokens(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, V, n).tolist()


def read_ahead_request(prompt, cancel=None) -> GenerationRequest:
    """What the window's read ahead asks (and the API's max_tokens 0, marked background)."""
    return GenerationRequest(
        prompt_ids=list(prompt), max_new_tokens=0, drafters=[], reading_progress=True, background=True, cancel=cancel
    )


def read_ahead(engine, prompt) -> FinalEvent:
    final = list(engine.generate(read_ahead_request(prompt)))[-1]
    assert final.error is None and final.token_ids == [], final
    return final


def ask_request(prompt, params=None, *, keep=True, n=8) -> GenerationRequest:
    return GenerationRequest(
        prompt_ids=list(prompt),
        max_new_tokens=n,
        sampling=params or SamplingParams(),
        drafters=[ContextDrafter()],
        budget=4,
        keep_cache=keep,
    )


def ask(engine, prompt, params=None, *, keep=True) -> FinalEvent:
    final = list(engine.generate(ask_request(prompt, params, keep=keep)))[-1]
    assert final.error is None, final.error
    return final


def new_engine(backend) -> Engine:
    engine = Engine(backend=backend)
    engine.eos_ids = set()
    return engine


class Arrival:
    """Counts the engine's forwards and, at the end of forward ``after``, has each of ``requests``
    asked on a thread of its own, in order, each once the stepper holds the one before: they arrive
    mid-read at a known forward."""

    def __init__(self, engine, after: int, *requests: GenerationRequest) -> None:
        self.engine, self.after, self.requests = engine, after, requests
        self.forwards = 0
        self.events: list[list] = [[] for _ in requests]
        self.threads: list[threading.Thread] = []
        decode = engine.backend.decode_many

        def counted(work):
            try:
                return decode(work)
            finally:
                self.forwards += 1
                if self.forwards == self.after:
                    self._arrive()

        engine.backend.decode_many = counted

    def _arrive(self) -> None:
        for events, request in zip(self.events, self.requests):
            waiting = self.engine.stepper.waiting
            thread = threading.Thread(target=lambda e=events, r=request: e.extend(self.engine.generate(r)))
            thread.start()
            self.threads.append(thread)
            while self.engine.stepper.waiting == waiting:
                time.sleep(0.001)

    def final(self, i: int = 0) -> FinalEvent:
        self.threads[i].join(120)
        return self.events[i][-1]


# ---------------------------------------------------------------- a Send during a long read ahead


def one_slot(kind: str, model):
    """The window's backends: one slot (torch's dynamic cache reads in growing Starts, the slots
    backend in Prefill chunks, as llama.cpp does)."""
    return TorchSlotsBackend(model, IdTokenizer(), slots=1) if kind == "slots" else open_torch(kind, model)


def plain_request(prompt, params, *, keep=True, n=8) -> GenerationRequest:
    return GenerationRequest(prompt_ids=list(prompt), max_new_tokens=n, sampling=params, keep_cache=keep)


def cold(model, kind: str, request: GenerationRequest) -> list[int]:
    """The answer of a fresh backend reading the whole prompt."""
    request = replace(request, keep_cache=False)
    return list(new_engine(one_slot(kind, model)).generate(request))[-1].token_ids


@pytest.mark.parametrize("kind", ["dynamic", "slots"])
@PARAMS
def test_an_answer_during_a_long_read_ahead_starts_within_one_chunk_and_reads_only_the_rest(model, kind, params):
    """The read ahead of a 1,000-token conversation holds the one slot when Send comes, after its
    second chunk. The answer is admitted at the next round, keeps the two chunks read and is fed only
    the rest; the read ahead reads nothing more and ends as a cancel."""
    engine = new_engine(one_slot(kind, model))
    fed = Fed(engine, model)
    try:
        conversation = tokens(1000, seed=1)
        typed = conversation + tokens(12, seed=2)
        send = plain_request(typed, params)  # plain: each forward after the prompt is one step, one token
        arrival = Arrival(engine, 2, send)
        background = list(engine.generate(read_ahead_request(conversation)))
        answer = arrival.final()
        chunk = READ_CHUNK if kind == "dynamic" else AHEAD_CHUNK  # growing Starts, or a read ahead's chunks
        read_before = 2 * chunk
        assert background[-1].finish_reason == "cancel" and background[-1].token_ids == []
        assert [e.read for e in background if isinstance(e, ReadingEvent)] == [0, chunk, read_before]
        assert answer.finish_reason == "length" and len(answer.token_ids) == 8
        assert (answer.stats.prompt_kept, answer.stats.prompt_read_ahead) == (read_before, read_before)
        assert fed.tokens == len(typed) - 1, "a prompt token was read twice"
        rest = len(typed) - 1 - read_before
        prompt_forwards = 1 if kind == "dynamic" else -(-rest // PREFILL_BATCH)  # the rest at once, or in chunks
        assert arrival.forwards == 2 + prompt_forwards + 8, "a forward ran between the arrival and the answer's"
        assert answer.token_ids == cold(model, kind, send), "the answer after a read ahead is not the cold read's"
    finally:
        fed.close()


def test_an_answer_reads_before_a_read_ahead_while_it_runs_and_one_waiting_goes_first():
    """Two slots: a read ahead reading in one; an answer arriving takes the other, and the read ahead
    gets no chunk until that answer ends; then it reads the rest. With one slot, an answer that comes
    after a waiting read ahead is admitted before it."""
    backend = HeldStandIn(slots=2)
    engine = engine_on(backend)
    conversation = [3 + i % 5 for i in range(2000)]
    send = GenerationRequest(prompt_ids=[2, 2, 2, 2], max_new_tokens=10)  # another conversation
    arrival = Arrival(engine, 2, send)
    background = list(engine.generate(read_ahead_request(conversation)))
    answer = arrival.final()
    assert answer.finish_reason == "length" and len(answer.token_ids) == 10
    assert backend.forwards[2:13] == [(1,)] * 11, "the read ahead read while the answer ran"
    assert background[-1].finish_reason == "length" and background[-1].stats.prompt_tokens == 2000
    assert [e.read for e in background if isinstance(e, ReadingEvent)][-1] == 1999, "the read ahead did not finish"

    backend = HeldStandIn(slots=1)
    engine = engine_on(backend)
    first = GenerationRequest(prompt_ids=[3, 4, 5, 6], max_new_tokens=10)
    second = GenerationRequest(prompt_ids=[2, 2, 2, 2], max_new_tokens=3)
    arrival = Arrival(engine, 2, read_ahead_request([7, 7, 7, 7, 7]), second)
    list(engine.generate(first))
    assert arrival.final(0).finish_reason == arrival.final(1).finish_reason == "length"
    reads = [tokens for tokens in backend.prefills if tokens[0] in (2, 7)]
    assert reads == [(2, 2, 2), (7, 7, 7, 7)], "the read ahead was admitted before the answer that came after it"


def test_an_exclusive_call_takes_the_model_from_a_read_ahead_at_the_next_round():
    backend = HeldStandIn(slots=1)
    engine = engine_on(backend)
    ran_after: list[int] = []
    calls: list[threading.Thread] = []

    def measure():  # e.g. the plain speed measured again: it waits for no answer to run
        ran_after.append(len(backend.forwards))

    decode = backend.decode_many

    def counted(work):
        result = decode(work)
        if len(backend.forwards) == 2:
            calls.append(threading.Thread(target=lambda: engine.stepper.call(measure, exclusive=True)))
            calls[0].start()
            while not engine.stepper._calls:  # queued before this round ends
                time.sleep(0.001)
        return result

    backend.decode_many = counted
    background = list(engine.generate(read_ahead_request([3 + i % 5 for i in range(2000)])))
    calls[0].join(30)
    assert ran_after == [2], "a forward ran between the call and its turn"
    assert background[-1].finish_reason == "cancel"
    assert [e.read for e in background if isinstance(e, ReadingEvent)] == [0, AHEAD_CHUNK, 2 * AHEAD_CHUNK]


def test_time_to_first_token_counts_from_the_request_a_wait_for_the_slot_included():
    """An answer that waits for the one slot (behind another answer, or a read ahead making way)
    counts that wait: its first token comes that much later after Send."""
    backend = TimedSlots(seconds=0.02, slots=1)
    engine = engine_on(backend)
    waiting = GenerationRequest(prompt_ids=[2, 2, 2, 2], max_new_tokens=2)
    arrival = Arrival(engine, 1, waiting)
    list(engine.generate(GenerationRequest(prompt_ids=[3, 4, 5, 6], max_new_tokens=10)))
    # it waited for the other's 10 steps, each a forward of at least 20 ms
    assert arrival.final().stats.time_to_first_token_ms >= 10 * 20


# ---------------------------------------------------------------- typing more, an edit


@pytest.mark.parametrize("kind", ["dynamic", "slots"])
@PARAMS
def test_typing_more_reads_only_the_new_tokens_and_an_edit_reads_from_the_edit(model, kind, params):
    engine = new_engine(one_slot(kind, model))
    fed = Fed(engine, model)
    try:
        history = tokens(120, seed=3)
        first = ask(engine, history, params)  # the turn before
        before = len(history) + len(first.token_ids) - 1  # what the slot keeps of it
        typing = history + first.token_ids + tokens(40, seed=4)

        fed.tokens = 0
        read_ahead(engine, typing[:-10])  # typing paused
        assert fed.tokens == len(typing) - 11 - before
        fed.tokens = 0
        read_ahead(engine, typing)  # ten tokens more typed
        assert fed.tokens == 10, "typing more read more than the new tokens"
        edited, edit_at = list(typing), len(typing) - 25
        edited[edit_at] = (edited[edit_at] + 1) % V
        fed.tokens = 0
        read_ahead(engine, edited)
        assert fed.tokens == len(edited) - 1 - edit_at, "an edit did not read from the edit"

        send = edited + tokens(3, seed=5)
        fed.tokens = 0
        answer = ask(engine, send, params)
        assert fed.tokens == 3 and answer.stats.prompt_kept == len(edited) - 1
        assert answer.stats.prompt_read_ahead == len(edited) - 1 - before
        whole = ask(new_engine(one_slot(kind, model)), send, params, keep=False)
        assert answer.token_ids == whole.token_ids, "the answer after reading ahead is not the cold read's"
    finally:
        fed.close()


@pytest.mark.parametrize("kind", ["dynamic", "slots"])
def test_a_read_ahead_trusted_with_one_token_it_did_not_read_is_caught(model, kind, monkeypatch):
    """The comparison above can fail: an edit of the last token read, kept as if the read ahead had
    read the new one (the kept count one too many), answers as if it were not edited."""
    engine = new_engine(one_slot(kind, model))
    conversation = tokens(16, seed=6)  # short: one token of it weighs on the answer
    read_ahead(engine, conversation)
    unedited = ask(new_engine(one_slot(kind, model)), conversation + tokens(6, seed=7), keep=False)
    for token in range(V):  # an edit that changes the answer, so keeping the old token shows
        send = conversation[:-2] + [token] + tokens(6, seed=7)
        expected = ask(new_engine(one_slot(kind, model)), send, keep=False)
        if expected.token_ids != unedited.token_ids:
            break

    def one_more(held, prompt, want_hidden=False):
        return min(common_prefix(held, prompt) + 1, len(prompt) - 1)

    monkeypatch.setattr(held_mod, "positions_to_keep", one_more)
    trusting = ask(engine, send)
    assert trusting.stats.prompt_kept == len(conversation) - 1
    assert trusting.token_ids != expected.token_ids


# ---------------------------------------------------------------- the answer's figures


def test_the_figures_say_what_was_read_ahead_and_restored_and_are_kept_with_the_conversation():
    from draftscope.core.session import answer_record
    from draftscope.core.words import answer_stats
    from draftscope.storage.import_check import figures

    backend = HeldStandIn(slots=1)
    engine = engine_on(backend)
    history = [3, 4, 5, 6, 7, 3, 4, 5]
    first = list(engine.generate(GenerationRequest(prompt_ids=history, max_new_tokens=5)))[-1]
    before = len(history) + 5 - 1
    conversation = history + first.token_ids + [6, 5, 4, 3] * 10
    backend.restoring[0] = (before, 0.04)  # the read ahead's set-up found the conversation on disk
    read_ahead(engine, conversation)
    final = list(engine.generate(GenerationRequest(prompt_ids=conversation + [2, 2], max_new_tokens=4)))[-1]
    ahead = len(conversation) - 1 - before
    stats = final.stats
    assert (stats.prompt_kept, stats.prompt_read_ahead) == (len(conversation) - 1, ahead)
    assert (stats.prompt_restored, stats.restore_seconds) == (before, 0.04)
    line = answer_stats(answer_record(final, None)[0])
    assert f"prompt {len(conversation) + 2} tokens: {ahead} read ahead, {before} restored from disk (0.04 s)" in line
    assert figures(answer_record(final, None)[0], "answer")["prompt_read_ahead"] == ahead

    again = list(engine.generate(GenerationRequest(prompt_ids=conversation + [2, 2, 1], max_new_tokens=2)))[-1]
    assert (again.stats.prompt_read_ahead, again.stats.prompt_restored) == (0, 0), "the read ahead was counted twice"
    assert "read ahead" not in answer_stats(answer_record(again, None)[0])
    assert f"prompt {len(conversation) + 3} tokens, {again.stats.prompt_kept} from cache" in answer_stats(
        answer_record(again, None)[0]
    )


class HeldStandIn(KeepsPrefixes, TimedSlots):
    """test_stepper's stand-in with the tokens each slot holds, so a prompt keeps what it shares, its
    prompt chunks as read (``prefills``), and a load from disk it can be told to report (``restoring``)."""

    max_context, batch_capacity = 4096, None

    def __init__(self, slots: int) -> None:
        super().__init__(seconds=0.0, slots=slots)
        self.held = HeldTokens(slots)
        self.last_kept = 0
        self.prefills: list[tuple[int, ...]] = []
        self.restoring: dict[int, tuple[int, float]] = {}

    def decode_many(self, work):
        for slot, item in work.items():
            if isinstance(item, Prefill):
                self.held.read(slot, item.start, item.tokens)
                self.prefills.append(tuple(item.tokens))
            else:
                self.held.verifying(slot, item.root, item.tree.tokens)
        return super().decode_many(work)

    def commit_slot(self, slot, path):
        self.held.committed(slot, self._cached[slot], path)
        super().commit_slot(slot, path)

    def truncate_slot(self, slot, length):
        self.held.cut(slot, length)
        super().truncate_slot(slot, length)

    def take_restored(self, slot):
        return self.restoring.pop(slot, (0, 0.0))


# ---------------------------------------------------------------- llama.cpp


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    from gguf_fixtures import write_tiny_gguf
    from llama_helpers import need_llama_cpp

    need_llama_cpp()
    model = tiny_llama(len(tokenizer), seed=3, sharpen=8.0, max_positions=2048)
    return write_tiny_gguf(tmp_path_factory.mktemp("read-ahead") / "tiny-F32.gguf", model, tokenizer_dir)


def llama_engine(gguf) -> Engine:
    from draftscope.engine.backends import open_backend

    return new_engine(open_backend(str(gguf), backend="llama.cpp"))


def words(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@PARAMS
def test_llama_cpp_after_a_read_ahead_prefills_only_what_was_typed_since(gguf, tokenizer, params, monkeypatch):
    from llama_helpers import assert_plain_or_near_tie

    engine = llama_engine(gguf)
    fed = Prefilled(monkeypatch)
    try:
        typing = words(tokenizer, "system: be brief. user: a file: " + "one two three four five six " * 30)
        read_ahead(engine, typing[:-4])
        assert fed.tokens == len(typing) - 5
        fed.tokens = 0
        read_ahead(engine, typing)
        assert fed.tokens == 4, "typing more read more than the new tokens"
        send = typing + words(tokenizer, " and what of red?")
        fed.tokens = 0
        answer = ask(engine, send, params)
        assert fed.tokens == len(send) - len(typing) and answer.stats.prompt_read_ahead == len(typing) - 1
        whole = ask(engine, send, params, keep=False)
        assert_plain_or_near_tie(engine, send, whole.token_ids, answer.token_ids, params)
    finally:
        engine.backend.close()


def test_llama_cpp_gives_the_model_to_an_answer_within_one_chunk_of_a_read_ahead(gguf, tokenizer, monkeypatch):
    from llama_helpers import assert_plain_or_near_tie

    engine = llama_engine(gguf)
    fed = Prefilled(monkeypatch)
    try:
        conversation = words(tokenizer, "system: be brief. user: a file: " + "one two three four five six " * 40)
        assert len(conversation) > 3 * AHEAD_CHUNK
        send = plain_request(conversation + words(tokenizer, " and red?"), SamplingParams())
        arrival = Arrival(engine, 2, send)
        background = list(engine.generate(read_ahead_request(conversation)))
        answer = arrival.final()
        assert background[-1].finish_reason == "cancel"
        assert (answer.stats.prompt_kept, answer.stats.prompt_read_ahead) == (2 * AHEAD_CHUNK, 2 * AHEAD_CHUNK)
        assert fed.tokens == len(send.prompt_ids) - 1, "a prompt token was read twice"
        whole = list(engine.generate(replace(send, keep_cache=False)))[-1]
        assert_plain_or_near_tie(engine, list(send.prompt_ids), whole.token_ids, answer.token_ids, SamplingParams())
    finally:
        engine.backend.close()
