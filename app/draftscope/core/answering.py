"""One answer's course through its session, whichever loop drives it: ``ChatSession.stream`` (a thread
of the face's own: the window's worker, the terminal) or ``ChatSession.stream_async`` (the server's
event loop). ``Answering`` tells ``session.events`` of each event, numbers a continued answer's steps as
the whole answer's, and at the end records the answer (history, learning), settles the versions and
tells ``answer_ended``. The end is one call (``end``), so a face may run it on a writer of its own: the
server records every answer on one thread, never on its event loop nor on the model's stepper thread.
"""

from __future__ import annotations

from draftscope.core import continuation
from draftscope.engine.events import FinalEvent, ReadingEvent, StepEvent

NO_FINAL = "the engine ended without a final event"


class Answering:
    """What a session hears of one answer, from its start (told on construction) to its end."""

    def __init__(self, session, request, *, keep: bool) -> None:
        """``keep``: record the answer (the race does not)."""
        self.session, self.request, self.keep = session, request, keep
        self.steps: list[StepEvent] = []
        going_on = session.continuing
        self.going_on = going_on if going_on is not None and going_on.request is request else None
        session.last_kept = None
        session.events.answer_started.emit(request)

    def passing(self, event: ReadingEvent | StepEvent) -> ReadingEvent | StepEvent:
        """A ReadingEvent or a StepEvent, told, as the face yields it (nothing of a reading is kept)."""
        if isinstance(event, ReadingEvent):
            self.session.events.reading.emit(event)
            return event
        if self.going_on is not None:  # a continued answer's steps are the whole answer's, live and kept
            event = continuation.numbered_on(event, self.going_on)
        self.steps.append(event)
        self.session.events.step.emit(event)
        return event

    def end(self, final: FinalEvent) -> FinalEvent:
        """The answer recorded (its message id: ``session.last_kept``), the versions settled, then told."""
        session = self.session
        if self.keep:
            session.last_kept = session.record(final, self.steps, self.request)
        session.settle_versions()
        session.events.answer_ended.emit(final, session.last_kept)
        return final

    def failed(self, exc: BaseException) -> None:
        """The engine refused the request, or recording failed: the versions settled, then told."""
        self.session.settle_versions()
        self.session.events.answer_failed.emit(str(exc) or type(exc).__name__)
