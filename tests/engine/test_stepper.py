"""One thread drives the model (issue 50), on a stand-in backend whose forward takes a set time and
records which slots each forward held: answers stepping together share forwards, one arriving
mid-round joins the next round, a cancel takes effect within one round, and a failure in one
answer's work ends that answer only."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from draftscope.draft_tree import DraftTree
from draftscope.drafters import Drafter
from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.work import Prefill
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import FinalEvent


class Words:
    """A tokenizer for ids alone."""

    chat_template = None
    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return "".join(f" {i}" for i in ids)


class TimedSlots(Backend):
    """Two slots; each forward sleeps ``seconds`` and says token 1 after everything; every forward's
    slots are recorded (``forwards``), with the thread that ran it."""

    kind, name, tokenizer, vocab, max_context, eos_ids, device = "stand-in", "stand-in", Words(), 8, 512, set(), "cpu"
    precision = "float32"
    reads_in_chunks = True
    batch_capacity = 200

    def __init__(self, seconds: float = 0.01, slots: int = 2) -> None:
        self.seconds, self.slots = seconds, slots
        self.forwards: list[tuple[int, ...]] = []
        self.threads: set[str] = set()
        self.fail_slot: int | None = None  # this slot's Verify gets an error as its result
        self._cached = [0] * slots

    def decode_many(self, work):
        time.sleep(self.seconds)
        self.forwards.append(tuple(sorted(work)))
        self.threads.add(threading.current_thread().name)
        out = {}
        for slot, item in work.items():
            if isinstance(item, Prefill):
                self._cached[slot] += len(item.tokens)
                continue
            if slot == self.fail_slot:
                out[slot] = RuntimeError("this slot's forward failed")
                continue
            logits = torch.zeros(1 + len(item.tree), self.vocab)
            logits[:, 1] = 1.0
            out[slot] = Verified(logits)
        return out

    def start(self, prompt, *, want_hidden=False):
        raise AssertionError("a slotted backend reads prompts in chunks")

    def verify(self, root, tree, *, want_hidden=False):
        raise AssertionError("the stepper verifies through decode_many")

    def commit_slot(self, slot, path):
        self._cached[slot] += 1 + len(path)

    commit = truncate = None

    def truncate_slot(self, slot, length):
        self._cached[slot] = min(self._cached[slot], length)

    def slot_cached(self, slot):
        return self._cached[slot]

    @property
    def cached(self):
        return self._cached[0]


def engine_on(backend) -> Engine:
    engine = Engine(backend=backend)
    engine.eos_ids = set()
    return engine


def request(tokens=10, **kw) -> GenerationRequest:
    return GenerationRequest(prompt_ids=[3, 4, 5, 6], max_new_tokens=tokens, **kw)


def run_in_thread(engine, req, out: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: out.extend(engine.generate(req)))
    thread.start()
    return thread


def test_answers_at_once_share_forwards_on_one_thread():
    backend = TimedSlots(seconds=0.01)
    engine = engine_on(backend)
    a, b = [], []
    threads = [run_in_thread(engine, request(20), a), run_in_thread(engine, request(20), b)]
    for t in threads:
        t.join(30)
    assert a[-1].finish_reason == b[-1].finish_reason == "length" and len(a[-1].token_ids) == 20
    steps = [f for f in backend.forwards if f]
    shared = sum(1 for f in steps if len(f) == 2)
    assert shared >= 15, backend.forwards  # nearly every step of the two answers in one forward
    assert backend.threads == {"stepper"}, "every forward ran on the stepper's thread"
    assert a[-1].stats.answers_per_forward > 1.5 and engine.stepper.mean_answers > 1.5


def test_an_answer_that_arrives_mid_round_joins_the_next_round():
    backend = TimedSlots(seconds=0.04)
    engine = engine_on(backend)
    first, second = [], []
    t1 = run_in_thread(engine, request(30), first)
    while len(backend.forwards) < 3:
        time.sleep(0.002)
    time.sleep(0.02)  # mid-forward
    arrived = len(backend.forwards)
    t2 = run_in_thread(engine, request(5), second)
    t1.join(30)
    t2.join(30)
    joined = next(i for i, f in enumerate(backend.forwards) if 1 in f)
    assert joined <= arrived + 1, (arrived, backend.forwards)  # the forward after the one it arrived in
    assert all(0 in f for f in backend.forwards[joined : joined + 5]), "the first answer went on beside it"


def test_a_cancel_takes_effect_within_one_round():
    backend = TimedSlots(seconds=0.02)
    engine = engine_on(backend)
    cancel = threading.Event()
    events = []
    for event in engine.generate(request(200, cancel=cancel)):
        events.append(event)
        if len(events) == 3:
            cancel.set()
            forwards_then = len(backend.forwards)
    assert events[-1].finish_reason == "cancel" and len(events[-1].token_ids) < 10
    assert len(backend.forwards) <= forwards_then + 1, "the answer stepped on past the round after the cancel"
    assert engine.stepper.busy == 0


def test_a_failure_in_one_answers_work_ends_that_answer_and_the_other_goes_on():
    backend = TimedSlots(seconds=0.005)
    engine = engine_on(backend)

    class Broken(Drafter):
        name = "broken"

        def propose(self, context_ids, budget):
            if len(context_ids) > 8:
                raise RuntimeError("the drafter broke")
            return DraftTree.empty()

    broken, fine = [], []
    threads = [
        run_in_thread(engine, request(30, drafters=[Broken()], budget=4), broken),
        run_in_thread(engine, request(30), fine),
    ]
    for t in threads:
        t.join(30)
    assert broken[-1].finish_reason == "error" and "the drafter broke" in broken[-1].error
    assert broken[-1].token_ids, "the answer so far stays"
    assert fine[-1].finish_reason == "length" and len(fine[-1].token_ids) == 30

    backend.fail_slot = 0  # a forward's error for one slot: that answer ends, the other is answered
    first, second = [], []
    threads = [run_in_thread(engine, request(10), first), run_in_thread(engine, request(10), second)]
    for t in threads:
        t.join(30)
    finals = sorted([first[-1], second[-1]], key=lambda f: f.finish_reason)
    assert [f.finish_reason for f in finals] == ["error", "length"], finals
    assert "this slot's forward failed" in finals[0].error
    assert engine.stepper.busy == 0


def test_a_call_runs_on_the_stepper_between_rounds_and_raises_where_it_was_made():
    backend = TimedSlots(seconds=0.005)
    engine = engine_on(backend)
    out = []
    thread = run_in_thread(engine, request(40), out)
    assert engine.stepper.call(lambda: threading.current_thread().name) == "stepper"
    with pytest.raises(ZeroDivisionError):
        engine.stepper.call(lambda: 1 / 0)
    thread.join(30)
    assert isinstance(out[-1], FinalEvent) and out[-1].finish_reason == "length"
    with engine.stepper.lease() as slot:  # a slot lent to a reader is not given to an answer
        assert engine.stepper.busy == 1
        final = list(engine.generate(request(3)))[-1]
        assert final.finish_reason == "length" and slot not in backend.forwards[-1]
    assert engine.stepper.busy == 0
