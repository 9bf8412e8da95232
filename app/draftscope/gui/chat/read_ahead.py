"""Reading the prompt while the user types (issue 61): what a user waits for after Send, on a CPU,
is mostly the model reading the conversation and its files. The window knows that prompt long
before Send, so while it is idle it has the model read it into the slot's cache: when a
conversation is opened, a file is attached or removed, an answer ends, and when typing pauses.
Send then reads only the rest (the kept-cache rule: the longest common prefix), and the answer is
the one a cold read gives.

The prompt is built as Send builds it (``ChatSession.outgoing``, with the tools Send would show the
model: gui/chat/tool_turns_qt.py), cut before the last word typed, whose tokens may still change. It
is read on a thread of its own (never the worker's: Send would queue behind it) as a background
answer of no tokens, which any real answer ends within one reading chunk; Send also cancels it
first. The composer says how far it got.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from draftscope.engine.cache_prefix import common_prefix
from draftscope.engine.engine import GenerationRequest
from draftscope.engine.events import FinalEvent, ReadingEvent

log = logging.getLogger(__name__)

DEBOUNCE_MS = 600  # a pause in typing this long reads what was typed
PROBE = "x"  # a word after the finished ones: where the prompt stops being sure
MIN_TOKENS = 2  # a prompt's last token is read with the answer: fewer leave nothing to read
JOIN_S = 5.0  # a cancelled read ends within a chunk; the window waits at most this when it closes
_LAST_SPACE = re.compile(r"(.*)\s", re.DOTALL)


def finished_words(text: str) -> str:
    """The text up to its last whitespace (stripped as Send strips it): the word being typed may
    still grow, and its tokens with it."""
    found = _LAST_SPACE.match(text)
    return found.group(1).strip() if found else ""


@dataclass(frozen=True)
class ReadPlan:
    ids: list[int]  # what is read: the prompt Send would send, up to the finished words
    total: int  # tokens of the prompt Send would send now


def plan_read(session, text: str, files, replacing: int | None, tools: list[dict] | None = None) -> ReadPlan:
    """What to read ahead of Send: the prompt ``session.outgoing`` builds for the composer's ``text``
    (as typed) and ``files``, shown ``tools`` (Send's), as far as it stays the same whatever word
    comes next. The files' passages are the ones Send would choose for the text so far. Raises what
    ``outgoing`` raises."""
    out = session.outgoing(text.strip(), files, replacing=replacing)

    def encode(messages: list[dict]) -> list[int]:
        return session.engine.encode_chat(messages, tools)

    now = encode(out.messages)
    done = finished_words(text)
    sure = encode(session.messages_with(done, out.sent, replacing=replacing))
    probe = encode(session.messages_with(f"{done} {PROBE}" if done else PROBE, out.sent, replacing=replacing))
    return ReadPlan(sure[: min(common_prefix(sure, probe), common_prefix(sure, now))], len(now))


class ReadAhead(QObject):
    """Reads the composer's prompt while the window is idle (``transcript`` not streaming, no file
    being read, Settings ▸ Generation ▸ Read ahead on, a model loaded). ``cancel`` before every
    answer the window asks for; ``close`` when the window goes."""

    done = Signal(object)  # the FinalEvent of a read ahead that read its whole prompt
    _heard = Signal(int, object)  # (its run, a ReadingEvent, FinalEvent or None: failed), to the UI thread

    def __init__(self, session, composer, transcript, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session, self.composer, self.transcript = session, composer, transcript
        self.timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self.timer.timeout.connect(self.start)
        self._heard.connect(self._on_heard)  # queued: emitted on the reading thread
        self._run = 0  # the current read ahead's number: a late word from an older one is ignored
        self._plan: ReadPlan | None = None
        self._cancel: threading.Event | None = None
        self.threads: list[threading.Thread] = []
        self.offered = lambda: None  # () -> the tools Send would show the model (the window's tool loop)
        self.busy = lambda: False  # () -> whether a tool loop is under way (the window is not idle)
        composer.chat_input.textChanged.connect(self.schedule)
        composer.chips.changed.connect(self.schedule)

    def schedule(self, *, fresh: bool = False) -> None:
        """Read once nothing has changed for DEBOUNCE_MS (each change starts the wait again).
        ``fresh``: another conversation: what was read for the last one is no longer shown (or read)."""
        if fresh:
            self.cancel()
        self.timer.start()

    def wanted(self) -> bool:
        """Whether the window is idle, with a model, and the user wants it read ahead."""
        return (
            self.session.engine is not None
            and self.session.settings.read_ahead
            and not self.transcript.streaming
            and not self.busy()
            and not self.composer.reader.reading
        )

    def start(self) -> None:
        """Read the prompt as it stands now (the last read ahead, if still reading, gives way)."""
        self.timer.stop()
        if not self.wanted():
            return
        composer = self.composer
        try:
            plan = plan_read(
                self.session,
                composer.chat_input.toPlainText(),
                composer.attachments,
                composer.editing_message_id,
                self.offered(),
            )
        except Exception as exc:  # files that cannot fit, a template that fails: Send will say what is wrong
            log.warning("read ahead: nothing read (%s)", exc or type(exc).__name__)
            return
        if len(plan.ids) < MIN_TOKENS:
            return
        self._stop_reading()
        self._run += 1
        self._plan, self._cancel = plan, threading.Event()
        request = GenerationRequest(
            prompt_ids=plan.ids,
            max_new_tokens=0,
            drafters=[],  # no drafter set up (or verify costs measured) for a read
            cancel=self._cancel,
            reading_progress=True,  # read in chunks: it can give way between them
            background=True,
        )
        self.threads = [t for t in self.threads if t.is_alive()]
        thread = threading.Thread(
            target=self._read, args=(self._run, self.session.engine, request), name="ReadAhead", daemon=True
        )
        self.threads.append(thread)
        thread.start()

    def cancel(self) -> None:
        """An answer is about to be asked for: the read ahead stops at its next chunk (what it read
        stays in the cache), and the composer no longer shows it."""
        self.timer.stop()
        self._stop_reading()
        self.composer.show_read_ahead(None)

    def close(self) -> None:
        """The window is closing: no read ahead outlives it."""
        self.cancel()
        for thread in self.threads:
            thread.join(JOIN_S)
        self.threads = []

    def _stop_reading(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
        self._plan = None

    # ------------------------------------------------------------------ the reading thread

    def _read(self, run: int, engine, request: GenerationRequest) -> None:
        try:
            for event in engine.generate(request):
                self._tell(run, event)
        except Exception as exc:  # a prompt too long for the context, a model closed by a reload
            log.warning("read ahead: stopped (%s)", exc or type(exc).__name__)
            self._tell(run, None)

    def _tell(self, run: int, event) -> None:
        try:
            self._heard.emit(run, event)
        except RuntimeError:  # the window is gone
            pass

    # ------------------------------------------------------------------ back on the UI thread

    @Slot(int, object)
    def _on_heard(self, run: int, event) -> None:
        plan = self._plan
        if run != self._run or plan is None:  # an older read ahead, or one cancelled since
            return
        if isinstance(event, ReadingEvent):  # its figures leave out what the cache kept: added back
            self.composer.show_read_ahead(len(plan.ids) - 1 - event.total + event.read, plan.total)
        elif isinstance(event, FinalEvent) and event.finish_reason == "length":
            self.composer.show_read_ahead(len(plan.ids) - 1, plan.total)
            self.done.emit(event)
        elif event is None or (isinstance(event, FinalEvent) and event.finish_reason == "error"):
            if event is not None:
                log.warning("read ahead: stopped (%s)", event.error)
            self.composer.show_read_ahead(None)
