"""Running the engine off the UI thread (superqt-style worker on a QThread).

``GenerationWorker`` lives on its own QThread. ``generate`` (a queued slot) drives the session's
one answer loop (``ChatSession.stream``, which also keeps the answer in the history). It says
nothing of the answer itself: its start, steps, end and failure are the session's to tell, and
views hear them through one channel, ``gui/session_qt.py``.
``run_tools`` runs the approved calls of a tool loop (core/tool_turns.py) on the same thread, so a
call and the answer that reads its result never overlap; ``tools_ran`` says when they are done.
``measure_baseline`` re-measures plain decoding speed, telling ``baseline_progress`` how far it is,
and reports it with ``baseline_measured``.
``stop`` may be called from any thread: the engine checks the flag between steps, so an answer
stops within one step.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from draftscope.engine.engine import GenerationRequest

log = logging.getLogger(__name__)

DECODING_NICENESS = 5  # how far decoding yields the CPU to the UI thread (Linux nice levels)
# How long a thread holding the GIL keeps it while another waits (Python's default: 5 ms). The UI
# thread shares it with two decoding threads (the model's stepper and this worker): a shorter turn
# lets a repaint in sooner.
GIL_SWITCH_S = 0.001


def lower_decoding_priority() -> None:
    """Let the UI thread win the CPU over decoding (Linux): raise the nice level of the calling
    thread and of torch's compute threads, which carry the process's name (Qt's own threads are
    named, and the UI thread is the process's main thread). On a machine with few cores, decoding
    otherwise keeps every core busy and the UI's repaints wait for a time slice. Also shortens the
    GIL's switch interval (GIL_SWITCH_S), so the UI thread waits less behind the decoding threads."""
    sys.setswitchinterval(GIL_SWITCH_S)
    if not hasattr(os, "setpriority") or not os.path.isdir("/proc/self/task"):
        return
    main = os.getpid()  # the main thread's id is the process id
    try:
        tasks = Path("/proc/self/task")
        process_name = (tasks / str(main) / "comm").read_text()
        targets = {threading.get_native_id()}
        for task in tasks.iterdir():
            if int(task.name) != main and (task / "comm").read_text() == process_name:
                targets.add(int(task.name))
        for tid in targets - {main}:
            if os.getpriority(os.PRIO_PROCESS, tid) < DECODING_NICENESS:
                os.setpriority(os.PRIO_PROCESS, tid, DECODING_NICENESS)
    except OSError:  # a thread ended meanwhile, or no permission: priorities are only a nicety
        pass


class GenerationWorker(QObject):
    baseline_measured = Signal(float)  # plain decoding tokens/s, measured again on this thread
    baseline_progress = Signal(object)  # the measurement's Stage (engine/stages.py): how far it is
    tools_ran = Signal(object)  # the ToolTurns whose approved calls were run (their results kept)

    def __init__(self, session, *, keep: bool = True) -> None:
        """``session``: the ChatSession whose answers this runs; ``keep``: record them (the race
        does not)."""
        super().__init__()
        self.session, self.keep = session, keep
        self._cancel = threading.Event()

    def stop(self) -> None:
        self._cancel.set()

    @Slot(object)
    def generate(self, request: GenerationRequest) -> None:
        self._cancel.clear()
        request.cancel = self._cancel
        request.reading_progress = True  # the window says how far a long message's reading is
        lower_decoding_priority()
        try:
            for number, _event in enumerate(self.session.stream(request, keep=self.keep)):
                if number == 0:  # the model's stepper thread, started for this answer, yields to the UI too
                    lower_decoding_priority()
        except Exception:  # e.g. the prompt outgrew the context window: the session told answer_failed
            log.exception("an answer ended in an error")  # what happened before the session could tell it

    @Slot(object)
    def run_tools(self, turns) -> None:
        """Run a tool loop's approved calls (blocking: MCP servers answer here, never on the UI thread)."""
        try:
            turns.run_approved()
        except Exception:  # a call's failure is its card's (the loop keeps it); this is the loop's own
            log.exception("running the approved tool calls failed")
        self.tools_ran.emit(turns)

    @Slot()
    def measure_baseline(self) -> None:
        """Measure plain decoding again (the machine's load and clocks drift; speedups must compare
        with a fresh figure). Queued behind any answer, so it never runs during one."""
        try:
            rate = self.session.engine.measure_baseline(progress=self.baseline_progress.emit)
        except Exception:  # a failed measurement keeps the old figure; answers are unaffected
            return
        if rate:
            self.baseline_measured.emit(float(rate))


class WorkerThread:
    """A worker moved to a started QThread, and a clean way to end both."""

    def __init__(self, worker: QObject) -> None:
        self.thread = QThread()
        self.thread.setObjectName(type(worker).__name__)
        self.worker = worker
        worker.moveToThread(self.thread)
        self.thread.start()

    def shutdown(self, timeout_ms: int = 5000) -> None:
        if hasattr(self.worker, "stop"):
            self.worker.stop()
        self.thread.quit()
        self.thread.wait(timeout_ms)
