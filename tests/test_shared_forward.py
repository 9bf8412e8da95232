"""The shared forward and the slot pool, on a stand-in backend whose forward takes a set time
(issue 41): rounds that stay together when an answer arrives mid-forward, a slot that a release from
another thread cannot double-book, and a failure after the forward that wakes every waiter."""

from __future__ import annotations

import threading
import time

import numpy as np

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.slots import SharedForward, SlotPool, Verify

ROOT_ONLY = DraftTree.empty()


class TimedBackend:
    """decode_many takes ``seconds`` and records how many answers each forward held."""

    kind, name, tokenizer, vocab, max_context, eos_ids, device = "stand-in", "stand-in", None, 8, 64, set(), "cpu"
    precision, precision_reason, model, gives_hidden = "float32", "", None, False

    def __init__(self, seconds: float = 0.0, slots: int = 2) -> None:
        self.seconds, self.slots = seconds, slots
        self.forwards: list[int] = []
        self.clear_gate: threading.Event | None = None

    def decode_many(self, work):
        time.sleep(self.seconds)
        self.forwards.append(len(work))
        return {slot: np.zeros((1, self.vocab), np.float32) for slot in work}

    def clear_slot(self, slot):
        if self.clear_gate is not None:
            self.clear_gate.wait(5)


def steps(shared: SharedForward, slot: int, count: int, delay: float = 0.0, work_s: float = 0.003) -> threading.Thread:
    """An answer of ``count`` steps, each followed by ``work_s`` of the loop's own work (sampling,
    events), as in the engine."""
    def answer():
        time.sleep(delay)
        shared.join(slot)
        for _ in range(count):
            shared.run(slot, Verify(1, ROOT_ONLY))
            time.sleep(work_s)
        shared.leave(slot)

    thread = threading.Thread(target=answer)
    thread.start()
    return thread


def test_an_answer_that_arrives_mid_forward_joins_the_rounds_after_it():
    """A 40 ms forward, a 10 ms wait, the second answer 25 ms late (mid-forward): once both run,
    their steps share forwards (counted from each item's submission, the late answer's wait was
    spent by the forward's end, and the answers took turns: 30 forwards of one answer for 15 steps each)."""
    backend = TimedBackend(seconds=0.040)
    shared = SharedForward(backend, wait_s=0.010)
    threads = [steps(shared, 0, 15), steps(shared, 1, 15, delay=0.025)]
    for t in threads:
        t.join(30)
    assert sum(backend.forwards) == 30
    assert len(backend.forwards) <= 18, backend.forwards
    assert shared.mean_answers >= 30 / 18 and shared.forwards == len(backend.forwards)


def test_a_release_from_another_thread_cannot_double_book_the_slot():
    """The slot is not emptied on release (its cache serves the conversation's next turn): a
    release from another thread hands it back whole, and no two answers ever hold one slot."""
    backend = TimedBackend(slots=2)
    pool = SlotPool(backend)
    first = pool.acquire()
    assert first.slot == 0
    backend.clear_gate = threading.Event()  # a release that emptied the slot would stop here
    releasing = threading.Thread(target=pool.release, args=(first,))
    releasing.start()
    releasing.join(5)
    assert not releasing.is_alive(), "the release waited to empty the slot"
    second = pool.acquire()  # the owner's thread starts its next answer
    assert pool.holds(second) and not pool.holds(first)
    third = []
    other = threading.Thread(target=lambda: third.append(pool.acquire()))
    other.start()
    other.join(5)
    assert third and {second.slot, third[0].slot} == {0, 1}  # never the slot the second answer holds


def test_a_failure_after_the_forward_wakes_every_waiter():
    """An item the forward's figures cannot count (here a tree that is None) once left every
    waiter of that forward hanging: each must hear back."""
    backend = TimedBackend(seconds=0.01)
    shared = SharedForward(backend, wait_s=0.005)
    heard = []

    def answer(slot):
        shared.join(slot)
        try:
            heard.append(shared.run(slot, Verify(1, None)))
        except Exception as exc:  # noqa: BLE001
            heard.append(exc)

    threads = [threading.Thread(target=answer, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads), "a waiter of the failed forward hangs"
    assert len(heard) == 2
