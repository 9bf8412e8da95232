"""How a face reads an answer's events from the stepper's thread: on a thread of its own (``follow``:
the window's worker, the terminal, the benchmarks block on the answer's queue), or awaited on an
asyncio event loop (``follow_async``: the server, no thread per answer). For the latter the answer's
queue is a ``LoopFeed``: the stepper's thread puts each event there and wakes the loop thread-safely
(``call_soon_threadsafe``), as vLLM's output collector does. Either way the reader tells the stepper
of each event it took (an answer runs at most ``MAX_LEAD`` steps ahead of its reader), and closing the
reader before the final event frees the answer's slot at the stepper's next round."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import AsyncGenerator, Iterator

from draftscope.engine.answer import Answer
from draftscope.engine.events import Event, FinalEvent
from draftscope.engine.stepper import Stepper


class LoopFeed:
    """An answer's event queue that a reader on an asyncio event loop awaits: ``put`` from any thread
    (the stepper's), ``ready`` awaited on the loop, then ``get`` takes the event without blocking."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._arrived = asyncio.Event()

    def put(self, event: Event, /) -> None:
        self._items.put(event)
        # a closed loop (the server stopped): nobody reads this answer any more, and the stepper goes on
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._arrived.set)

    def get(self) -> Event:
        return self._items.get()

    async def ready(self) -> None:
        """Until an event waits to be taken. Cleared before looking, so an event put meanwhile wakes it."""
        while self._items.empty():
            self._arrived.clear()
            if self._items.empty():
                await self._arrived.wait()


def follow(stepper: Stepper, answer: Answer) -> Iterator[Event]:
    """``answer``'s events on the caller's thread, submitted at the first ``next``."""
    stepper.submit(answer)
    try:
        while True:
            event = answer.next_event()
            stepper.taken(answer)
            yield event
            if isinstance(event, FinalEvent):
                return
    finally:
        if not answer.finished:
            stepper.abandon(answer)


async def follow_async(stepper: Stepper, answer: Answer) -> AsyncGenerator[Event, None]:
    """``answer``'s events awaited on the running event loop; close it (``contextlib.aclosing``) to
    free the slot at once rather than at garbage collection."""
    feed = LoopFeed(asyncio.get_running_loop())
    answer.events = feed  # before it is submitted: nothing was said yet
    stepper.submit(answer)
    try:
        while True:
            await feed.ready()
            event = answer.next_event()
            stepper.taken(answer)
            yield event
            if isinstance(event, FinalEvent):
                return
    finally:
        if not answer.finished:
            stepper.abandon(answer)
