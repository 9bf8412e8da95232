"""One thread drives the model (as llama-server's ``update_slots`` and vLLM's ``EngineCore.step``): each
round it admits waiting answers into free slots, asks every answer for its work (a prompt chunk, or a
root and its draft tree), runs one forward for all of them, and hands each its result. Answers join and
leave between rounds; an answer's events go to its own queue (engine/answer.py), which its reader
takes from (engine/event_feed.py): ``Engine.generate`` on the caller's thread, ``Engine.generate_async``
awaited on an event loop (the server), woken thread-safely from this thread.

Whatever else uses the loaded model (measurements, a recurrent head's training reading rows through
llama.cpp) runs on the same thread, between rounds: ``call`` (``exclusive``: once no answer runs),
``lease`` (a slot of its own while it reads). The thread ends after a while with nothing to do, so a
model that is dropped is not kept alive by it, and starts again with the next answer; ``close`` ends it
at once, for good (a model a reload replaced: its memory is then freed).

A background answer (a read ahead: ``GenerationRequest.background``) has the lowest priority: it is
admitted after every waiting foreground answer, gets no prompt chunk while a foreground answer runs,
and makes way (ends as a cancel, what it read kept in its slot) when a foreground answer or an
exclusive call needs its slot, so that one starts at the next round: within one reading chunk."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from draftscope.engine.ahead_marks import SlotMarks
from draftscope.engine.answer import Answer
from draftscope.engine.arrays import inference
from draftscope.engine.backends.base import Backend
from draftscope.engine.backends.work import ForwardStats, Prefill, Verify, tokens_of
from draftscope.engine.cache_prefix import common_prefix

IDLE_S = 5.0  # the thread ends after this long with nothing to do
MAX_LEAD = 2  # steps an answer runs ahead of its reader: a paused reader pauses its answer (and a cancel
# set after an event takes effect within the steps already said), while a reader that keeps up never waits


T = TypeVar("T")

CLOSED = "the model was closed (another was loaded in its place, or the app is quitting)"


class ModelClosedError(RuntimeError):
    """An answer or call asked of a model whose engine was closed."""


class _Call(Generic[T]):
    """A function to run on the stepper's thread, and its outcome."""

    def __init__(self, fn: Callable[[], T], exclusive: bool) -> None:
        self.fn, self.exclusive = fn, exclusive
        self.done = threading.Event()
        self.result: T  # once fn returned
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # raised again on the caller's thread
            self.error = exc
        self.done.set()


class Stepper:
    """The model's answers and its one driving thread. ``size``: answers at once (the backend's slots)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        # a call on the backend from another thread runs here (llama_thread.serialised); a weak
        # reference, so the engine's model is freed at its last reference, not by a full collection
        backend.home = weakref.ref(self)  # type: ignore[attr-defined]  # read by getattr; Backend declares no home
        self.size = int(backend.slots)
        self._cond = threading.Condition()
        self._waiting: deque[Answer] = deque()  # answers not yet in a slot, in the order they came
        self._running: dict[int, Answer] = {}  # slot -> its answer
        self._leased: set[int] = set()  # slots lent to a reader (lease)
        self._free = list(range(self.size))
        self._released = dict.fromkeys(range(self.size), 0)  # slot -> when last released (a count): LRU on ties
        self._releases = 0
        self._calls: deque[_Call[Any]] = deque()
        self._thread: threading.Thread | None = None
        self._freed = False  # a slot was given back in this round
        self._poked = False  # woken since the round began (an event taken, an answer submitted or dropped)
        self._name = "llama.cpp stepper" if backend.kind == "llama.cpp" else "stepper"  # llama.cpp's calls run inline
        self.last = ForwardStats()
        self.forwards = 0  # forwards run, and the answers they held, since the counts were reset
        self.answers_in_forwards = 0
        self._closed = False  # close() was called: no answer or call runs any more
        self._marks = SlotMarks()  # what read aheads left in each slot, for the next answer's figures

    # ------------------------------------------------------------------ what callers see

    @property
    def busy(self) -> int:
        """Slots in use: answering, or lent to a reader."""
        with self._cond:
            return len(self._running) + len(self._leased)

    @property
    def waiting(self) -> int:
        """Answers waiting for a slot."""
        with self._cond:
            return len(self._waiting)

    @property
    def mean_answers(self) -> float:
        """Answers per forward on average (0.0 before the first)."""
        return self.answers_in_forwards / self.forwards if self.forwards else 0.0

    def reset_counts(self) -> None:
        """Count forwards from now (after the load-time measurements)."""
        self.forwards = self.answers_in_forwards = 0

    def submit(self, answer: Answer) -> None:
        with self._cond:
            if not self._closed:
                self._waiting.append(answer)
                self._wake()
                return
        answer.fail(ModelClosedError(CLOSED))

    def taken(self, answer: Answer) -> None:
        """The answer's reader took an event: an answer held back for it may step again."""
        if answer.lead() == MAX_LEAD - 1:
            with self._cond:
                self._poke()

    def abandon(self, answer: Answer) -> None:
        """The answer's generator was closed or dropped: its slot is freed at the next round."""
        with self._cond:
            answer.abandoned = True
            self._wake()

    def call(self, fn: Callable[[], T], *, exclusive: bool = False) -> T:
        """``fn()`` on the stepper's thread between rounds (``exclusive``: once no answer runs, none
        admitted meanwhile); its result, or its error raised here."""
        if self._on_thread():
            return fn()
        job = _Call(fn, exclusive)
        with self._cond:
            if self._closed:
                raise ModelClosedError(CLOSED)
            self._calls.append(job)
            self._wake()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    @contextlib.contextmanager
    def lease(self, cancel: threading.Event | None = None) -> Iterator[int]:
        """A free slot of its own while the block runs (waiting while every slot is busy): for reading
        rows through the model (a recurrent head's training) beside the answers."""
        with self._cond:
            while not self._free:
                if cancel is not None and cancel.is_set():
                    raise InterruptedError("cancelled while waiting for a slot of the model")
                self._cond.wait(timeout=0.1)
            slot = self._free.pop(0)
            self._leased.add(slot)
            self._marks.drop(slot)
        try:
            yield slot
        finally:
            with self._cond:
                self._leased.discard(slot)
                self._give_back(slot)

    def close(self, timeout: float = 60.0) -> bool:
        """No more answers or calls: those waiting or running end with an error, and the thread ends
        (joined, up to ``timeout`` seconds). True once no forward can run any more, so the backend's
        memory may be freed."""
        with self._cond:
            self._closed = True
            thread = self._thread
            if thread is None:
                self._end_all()
            else:
                self._poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            return not thread.is_alive()
        return thread is None

    def _end_all(self) -> None:
        """Called holding the lock, once closed: every answer and call left ends with an error."""
        answers = [*self._running.values(), *self._waiting]
        self._running.clear()
        self._waiting.clear()
        for answer in answers:
            answer.fail(ModelClosedError(CLOSED))
        while self._calls:
            job = self._calls.popleft()
            job.error = ModelClosedError(CLOSED)
            job.done.set()

    # ------------------------------------------------------------------ the thread

    def _on_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _wake(self) -> None:
        """Called holding the lock: the thread runs (started again if it had ended)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._drive, name=self._name, daemon=True)
            self._thread.start()
        self._poke()

    def _poke(self) -> None:
        """Called holding the lock: something changed since the round began; the thread must not sleep."""
        self._poked = True
        self._cond.notify_all()

    def _drive(self) -> None:
        with inference():  # torch's inference mode where a torch model runs; nothing on llama.cpp
            while True:
                with self._cond:
                    if self._closed:
                        self._end_all()
                        self._thread = None
                        return
                if self._round():
                    continue
                with self._cond:
                    if self._poked:  # woken while the round ran: another round at once
                        self._poked = False
                        continue
                    if self._has_work():  # answers held back until their readers catch up (taken wakes it)
                        self._cond.wait(timeout=0.05)
                        continue
                    self._cond.wait(timeout=IDLE_S)
                    if not self._has_work():
                        self._thread = None  # the next submit starts another
                        return

    def _has_work(self) -> bool:
        return bool(self._waiting or self._running or self._calls)

    # ------------------------------------------------------------------ a round

    def _round(self) -> bool:
        """Calls, admissions, one forward for every answer's work, their results. False: nothing to do."""
        with self._cond:
            self._poked = False
        self._freed = False
        ran = self._run_calls()
        self._make_way_for_calls()
        self._admit()
        work = self._plan()
        if not work:  # every answer waits for its reader (or none runs): the caller sleeps until woken
            return ran or self._freed  # a slot freed this round may admit a waiting answer at once
        results, seconds = self._forward(work)
        self._accept(work, results, seconds)
        return True

    def _run_calls(self) -> bool:
        """The calls waiting, in order; an exclusive one waits (and holds back admissions) until no answer runs."""
        ran = False
        while True:
            with self._cond:
                if not self._calls or (self._calls[0].exclusive and self._running):
                    return ran
                job = self._calls.popleft()
            job.run()
            ran = True

    def _make_way_for_calls(self) -> None:
        """An exclusive call waits for no answer to run: background answers make way for it."""
        with self._cond:
            if self._calls and self._calls[0].exclusive:
                for answer in self._running.values():
                    if answer.request.background:
                        answer.yielding = True

    def _admit(self) -> None:
        """Waiting answers into free slots, foreground ones first and each group in order (each into
        the slot whose cache shares most with its prompt); the cancelled and the abandoned leave the
        queue wherever they are in it."""
        self._drop_gone()
        while True:
            with self._cond:
                if not self._waiting or (self._calls and self._calls[0].exclusive):
                    return
                answer = self._next_waiting()
                if answer.fork is not None and answer.fork.gathering():  # n answers to one prompt start together
                    return
                slot = self._slot_for(answer)
                if slot is None:
                    return
                self._waiting.remove(answer)
                self._free.remove(slot)
                self._running[slot] = answer
                if not answer.request.background:  # it reads in the slot: the read aheads' mark ends with it
                    answer.ahead = self._marks.take(slot)
            try:
                answer.begin(self.backend, slot)
            except Exception as exc:  # that answer ends with its error; the others go on
                answer.fail(exc)
                self._release(slot)

    def _drop_gone(self) -> None:
        with self._cond:
            gone = [
                a for a in self._waiting if a.abandoned or (a.request.cancel is not None and a.request.cancel.is_set())
            ]
            for answer in gone:
                self._waiting.remove(answer)
        for answer in gone:
            if not answer.abandoned:
                answer.cancelled_waiting()

    def _next_waiting(self) -> Answer:
        """Called holding the lock: the first foreground answer waiting, else the first background one."""
        return next((a for a in self._waiting if not a.request.background), self._waiting[0])

    def _slot_for(self, answer: Answer) -> int | None:
        """Called holding the lock: the slot ``answer`` goes into now, or None (it waits). A foreground
        answer that finds no free slot, or whose prompt a read ahead's slot serves best, asks that
        background answer to make way: it ends in this round's plan, and the slot is free at the next."""
        background = sorted(s for s, a in self._running.items() if a.request.background)
        if answer.request.background or not background:
            return self._best_free(answer.prompt) if self._free else None
        wanted = self._wanted_background(answer.prompt, background)
        if wanted is None:
            return self._best_free(answer.prompt)
        self._running[wanted].yielding = True
        return None

    def _wanted_background(self, prompt: list[int], background: list[int]) -> int | None:
        """Called holding the lock: the slot of a background answer a foreground ``prompt`` should take,
        or None (a free slot serves it as well). With a free slot, a read ahead's slot is taken only
        when it shares more with the prompt than any free one does, and more than that read ahead
        kept: the prompt goes on from what it read (the conversation it was reading ahead)."""
        try:
            shared = {s: common_prefix(self.backend.held_tokens(s), prompt) for s in [*self._free, *background]}
        except Exception:  # a backend that ended (a lost worker): no slot serves it better
            shared = dict.fromkeys([*self._free, *background], 0)
        best = max(background, key=lambda s: (shared[s], -s))
        if not self._free:
            return best
        enough = max(max(shared[s] for s in self._free), self._running[best].kept)
        return best if shared[best] > enough else None

    def _best_free(self, prompt: list[int]) -> int:
        """Called holding the lock: the free slot whose cache shares the longest prefix with ``prompt``;
        on a tie the one used least recently, so a new conversation does not push out one just answered."""
        if len(self._free) == 1:
            return self._free[0]
        try:
            shared = {slot: common_prefix(self.backend.held_tokens(slot), prompt) for slot in self._free}
        except Exception:  # a backend that ended (a lost worker): any slot, its start reopens it
            return self._free[0]
        return max(self._free, key=lambda slot: (shared[slot], -self._released[slot], -slot))

    def _plan(self) -> dict[int, Prefill | Verify]:
        """Each running answer's work for this forward: trees first, then prompt chunks in the room left."""
        shared = self.last if self.size > 1 else None
        room = self.backend.batch_capacity
        work: dict[int, Prefill | Verify] = {}
        foreground = any(not a.request.background for a in self._running.values())
        for reading in (False, True):
            for slot, answer in sorted(self._running.items()):
                if answer.abandoned:
                    self._release(slot)
                    continue
                if (answer.phase == "prompt") != reading or slot in work or self._held_back(answer, foreground):
                    continue
                item = self._ask(answer, lambda: answer.plan(room, shared))  # noqa: B023 - called at once, in this iteration
                if answer.finished:
                    self._release(slot)
                elif item is not None:
                    work[slot] = item
                    room = None if room is None else room - tokens_of(item)
        return work

    @staticmethod
    def _held_back(answer: Answer, foreground: bool) -> bool:
        """Whether the answer gets no work this round: its reader is behind (unless it must make way
        for another answer, which it does at once), or it is a background answer whose prompt waits
        while a foreground answer runs."""
        if answer.yielding:
            return False
        if answer.lead() >= MAX_LEAD:
            return True
        reading_behind = foreground and answer.request.background and answer.phase == "prompt"
        return reading_behind and not answer.told_to_stop()

    def _forward(self, work: dict[int, Prefill | Verify]) -> tuple[dict, float]:
        started = time.perf_counter()
        try:
            results = self.backend.decode_many(work)  # an item that failed has its error as its result
        except Exception as exc:  # every answer in the forward hears of it
            results = {slot: exc for slot in work}
        seconds = time.perf_counter() - started
        self.last = ForwardStats(sum(tokens_of(item) for item in work.values()), len(work), seconds)
        self.forwards += 1
        self.answers_in_forwards += len(work)
        return results, seconds

    def _accept(self, work: dict[int, Prefill | Verify], results: dict, seconds: float) -> None:
        shared = self.last if self.size > 1 else None
        for slot in work:
            answer = self._running[slot]
            # a prompt chunk has no result unless its last hidden state was asked for
            missing = (
                RuntimeError("the forward ended without a result for this answer")
                if isinstance(work[slot], Verify)
                else None
            )
            result = results.get(slot, missing)
            self._ask(answer, lambda: answer.accept(result, seconds=seconds, answers=len(work), shared=shared))  # noqa: B023 - called at once, in this iteration
            if answer.finished:
                self._release(slot)

    @staticmethod
    def _ask(answer: Answer, fn: Callable[[], T]) -> T | None:
        """``fn()`` for one answer: a failure ends that answer with its error, never the round."""
        try:
            return fn()
        except Exception as exc:
            answer.fail(exc)
            return None

    def _release(self, slot: int) -> None:
        with self._cond:
            answer = self._running.pop(slot, None)
            if answer is not None and answer.request.background and answer.phase != "waiting":
                self._marks.background_ended(slot, answer.kept, answer.read_to(), answer.restored)
            self._give_back(slot)
        self._freed = True

    def _give_back(self, slot: int) -> None:
        """Called holding the lock: the slot is free again; its cache stays for the conversation's next turn."""
        self._releases += 1
        self._released[slot] = self._releases
        self._free.append(slot)
        self._free.sort()
        self._cond.notify_all()
