"""The Qt face of a session's and a runtime's events (``ChatSession.events``, ``Runtime.events``).

Those are Qt-free and emitted on the thread where things happen: the worker thread that runs an
answer, the learner's thread. ``SessionSignals`` re-emits them as Qt signals of an object that
lives on the UI thread, and emits them *on* that thread: news from another thread crosses over
through one queued relay first, so every observer (a view, a test waiting for ``answer_ended``)
hears it in the order it connected, never one of them before the window has handled it. This is
the window's one channel for an answer's course, its end included.
Steps are handed on in batches, at most ~30 a second: a view redrawn for every step of a fast
model starves the UI thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal, Slot

UPDATE_INTERVAL_S = 1 / 30


class SessionSignals(QObject):
    answer_started = Signal()  # a new answer begins (views reset)
    steps = Signal(list)  # [StepEvent, ...] of the answer being written, since the last emission
    reading = Signal(object)  # ReadingEvent: how far the prompt's reading is, before the first step
    answer_ended = Signal(object, object)  # FinalEvent (any finish reason), its message id (None: not kept)
    answer_failed = Signal(str)  # the engine refused the request
    learned = Signal(object)  # LearnedStats: the model's learned answers were re-indexed
    notice = Signal(str)  # something the user should know (a datastore changed on disk)
    _relay = Signal(str, object)  # (a signal's name, its arguments): carried to this object's thread

    def __init__(
        self, session, runtime=None, parent: QObject | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``clock``: seconds, for the batching (a test's own clock)."""
        super().__init__(parent)
        self._pending: list = []
        self._clock = clock
        self._last: float | None = None  # when steps were last handed on (None: not yet in this answer)
        self._relay.connect(self._deliver)  # direct on the UI thread, queued from any other
        # psygnal holds bound methods weakly: this object, not the session, decides how long it lives
        self._links = [
            (session.events.answer_started, self._on_started),
            (session.events.step, self._on_step),
            (session.events.reading, self._on_reading),
            (session.events.answer_ended, self._on_ended),
            (session.events.answer_failed, self._on_failed),
        ]
        if runtime is not None:
            self._links += [(runtime.events.learned, self._on_learned), (runtime.events.notice, self._on_notice)]
        for signal, slot in self._links:
            signal.connect(slot)

    def disconnect_all(self) -> None:
        """Stop hearing the session (before this object goes: a late emit must not reach it)."""
        for signal, slot in self._links:
            signal.disconnect(slot, missing_ok=True)
        self._links = []

    # These run on the answering thread.

    def _on_started(self, _request) -> None:
        self._pending, self._last = [], None
        self._tell(
            "answer_started",
        )

    def _on_step(self, event) -> None:
        self._pending.append(event)
        now = self._clock()
        if self._last is None or now - self._last >= UPDATE_INTERVAL_S:  # the first step shows at once
            self._flush()
            self._last = now

    def _on_reading(self, event) -> None:
        self._tell("reading", event)

    def _on_ended(self, final, message_id) -> None:
        self._flush()
        self._tell("answer_ended", final, message_id)

    def _on_failed(self, message: str) -> None:
        self._tell("answer_failed", message)

    def _on_learned(self, stats) -> None:  # the learner's thread
        self._tell("learned", stats)

    def _on_notice(self, text: str) -> None:
        self._tell("notice", text)

    def _tell(self, name: str, *args) -> None:
        self._relay.emit(name, args)

    @Slot(str, object)
    def _deliver(self, name: str, args: tuple) -> None:
        getattr(self, name).emit(*args)

    def _flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            self._tell("steps", batch)
