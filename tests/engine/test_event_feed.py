"""An answer's events awaited on an asyncio event loop (engine/event_feed.py, the server's reader): put
from another thread (the stepper's), each wakes the loop, each is told taken; closing the reader
before the final event abandons the answer; an event put once the loop is gone raises nothing (the
stepper's thread goes on). Qt-free and model-free: a scripted answer and stepper."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading

from draftscope.engine.event_feed import follow_async
from draftscope.engine.events import FinalEvent

FINAL = FinalEvent("length", "", [], stats=None)


class ScriptedAnswer:
    """What a reader uses of an answer: its queue (replaced by the feed), next_event, finished."""

    def __init__(self) -> None:
        self.events = queue.SimpleQueue()
        self.finished = False

    def next_event(self):
        return self.events.get()


class ScriptedStepper:
    """Says ``script`` from a thread of its own, each event once the reader took the one before."""

    def __init__(self, script: list) -> None:
        self.script, self.taken_count, self.abandoned = script, 0, False
        self.turn = threading.Semaphore(1)

    def submit(self, answer) -> None:
        self.answer = answer
        threading.Thread(target=self._say, daemon=True).start()

    def _say(self) -> None:
        for event in self.script:
            if not self.turn.acquire(timeout=5) or self.abandoned:
                return
            self.answer.finished = event is FINAL
            self.answer.events.put(event)

    def taken(self, answer) -> None:
        self.taken_count += 1
        self.turn.release()

    def abandon(self, answer) -> None:
        self.abandoned = True


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=10))


def test_events_put_on_another_thread_are_awaited_in_order_each_told_taken():
    script = ["one", "two", "three", FINAL]
    stepper, answer = ScriptedStepper(script), ScriptedAnswer()

    async def read():
        return [event async for event in follow_async(stepper, answer)]

    assert run(read()) == script
    assert stepper.taken_count == len(script) and not stepper.abandoned
    answer.events.put("late")  # the loop is closed: the stepper's put must not raise


def test_closing_the_reader_before_the_final_event_abandons_the_answer():
    stepper, answer = ScriptedStepper(["one", "two", FINAL]), ScriptedAnswer()

    async def read_one():
        async with contextlib.aclosing(follow_async(stepper, answer)) as events:
            async for event in events:
                return event

    assert run(read_one()) == "one"
    assert stepper.abandoned, "a reader that left must free the answer's slot"
