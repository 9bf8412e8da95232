"""The one pattern for background jobs in the GUI (downloads, datastore builds, training).

A dialog owns a ``JobRunner``: ``start(job)`` runs ``job(report, status, cancel)`` on a thread of
its own; a timer polls what the job reported and hands it to the dialog's callbacks on the UI
thread (progress and status, then ``on_done(value)`` or ``on_failed(exc)``); ``cancel()`` sets the
job's token; ``close()`` (when the dialog closes, or the application quits) cancels, stops the
polling and ends the thread. Also the widgets every job dialog shows: a wrapping label, a note, a
progress row, the time left in words."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QMetaObject, QObject, Qt, QTimer, Slot
from PySide6.QtWidgets import QApplication, QProgressBar

from draftscope.core.words import eta_text, megabytes
from draftscope.datastore.progress import CancelToken
from draftscope.gui.generation_worker import WorkerThread

POLL_INTERVAL_S = 0.05  # progress repaints ~20 times a second
PROGRESS_STEPS = 1000  # progress bars count in permille: byte counts overflow a Qt int
_STRAGGLERS: list[WorkerThread] = []  # worker threads still finishing a cancelled job

Job = Callable[[Callable[[Any], None], Callable[[str], None], CancelToken], Any]


def _end_thread(thread: WorkerThread) -> None:
    """End a job's thread; one still running a job that ignores its cancel is kept alive here,
    since destroying a running QThread aborts the process."""
    thread.shutdown(10_000)
    if thread.thread.isRunning():
        _STRAGGLERS.append(thread)


class _JobWorker(QObject):
    """Runs the job on its thread. Reports land in attributes that the runner polls, so a fast
    stream of progress costs no signal emissions (PySide6 6.12.0 on Python < 3.12 leaks a
    reference to True on every Python-side emit)."""

    def __init__(self, job: Job, token: CancelToken) -> None:
        super().__init__()
        self.job, self.token = job, token
        self._lock = threading.Lock()
        self._progress = self._status = self._outcome = None

    @Slot()
    def run(self) -> None:
        try:
            outcome = ("done", self.job(self._report, self._set_status, self.token))
        except Exception as exc:  # shown to the user, with a retry
            outcome = ("failed", exc)
        with self._lock:
            self._outcome = outcome

    def _report(self, value) -> None:
        with self._lock:
            self._progress = value

    def _set_status(self, text: str) -> None:
        with self._lock:
            self._status = text

    def take(self) -> tuple:
        """(latest progress, latest status, outcome) since the last call; None where nothing new."""
        with self._lock:
            taken = self._progress, self._status, self._outcome
            self._progress = self._status = self._outcome = None
        return taken


class JobRunner(QObject):
    """One background job at a time for a dialog: its thread, the polling, its cancel and the
    teardown. Callbacks run on the UI thread; progress and status stop reaching them once the job
    is cancelled (the dialog says "Cancelling …" meanwhile), the outcome always does, unless the
    runner was closed."""

    def __init__(
        self,
        parent: QObject,
        *,
        on_progress: Callable[[Any], None] | None = None,
        on_status: Callable[[str], None] | None = None,
        on_done: Callable[[Any], None],
        on_failed: Callable[[Exception], None],
    ) -> None:
        super().__init__(parent)
        self._on_progress, self._on_status = on_progress, on_status
        self._on_done, self._on_failed = on_done, on_failed
        self._thread: WorkerThread | None = None
        self._token: CancelToken | None = None
        self._closed = False
        self._poll = QTimer(self, interval=int(POLL_INTERVAL_S * 1000))
        self._poll.timeout.connect(self._take)
        app = QApplication.instance()
        if app is not None:  # quitting without closing the dialog still ends the job's thread
            app.aboutToQuit.connect(self.close)

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def cancelled(self) -> bool:
        """Whether the running job (or, once it ended, the last one) was cancelled."""
        return self._token is not None and self._token.cancelled

    def start(self, job: Job) -> bool:
        """Run ``job(report, status, cancel)`` on a new thread; False (and nothing runs) while
        another job runs or after ``close``."""
        if self.running or self._closed:
            return False
        self._token = CancelToken()
        # a thread per job, ended with it: an idle dialog holds no running thread
        self._thread = WorkerThread(_JobWorker(job, self._token))
        QMetaObject.invokeMethod(self._thread.worker, "run", Qt.ConnectionType.QueuedConnection)
        self._poll.start()
        return True

    def cancel(self) -> bool:
        """Ask the running job to stop; True when this call did (False: none runs, or already asked)."""
        if not self.running or self.cancelled:
            return False
        self._token.cancel()
        return True

    def close(self) -> None:
        """The dialog is closing: cancel the job, deliver nothing more, end the thread."""
        self._closed = True
        self._poll.stop()
        if self._thread is not None:
            self._token.cancel()
            thread, self._thread = self._thread, None
            _end_thread(thread)

    def _take(self) -> None:
        if self._thread is None:
            self._poll.stop()
            return
        progress, status, outcome = self._thread.worker.take()
        if not self.cancelled:
            if status is not None and self._on_status is not None:
                self._on_status(status)
            if progress is not None and self._on_progress is not None:
                self._on_progress(progress)
        if outcome is None:
            return
        self._poll.stop()
        thread, self._thread = self._thread, None
        _end_thread(thread)  # its job has returned: it ends at once
        what, value = outcome
        (self._on_done if what == "done" else self._on_failed)(value)


class TransferRate:
    """A download's progress in words: bytes so far, the rate since the first report, time left."""

    def __init__(self) -> None:
        self._origin: tuple[float, int] | None = None

    def restart(self) -> None:
        self._origin = None

    def show(self, bar: QProgressBar, what: str, done: int, total: int | None) -> str:
        """Set ``bar`` to the download's progress and say where it stands: "Downloading X: 12.0
        of 980.0 MB · 8.1 MB/s · about 2 min left" (busy bar and bytes only while the total is unknown)."""
        if not total:
            bar.setRange(0, 0)
            return f"{what}: connecting to the package index …" if not done else f"{what}: {megabytes(done)} MB"
        bar.setRange(0, PROGRESS_STEPS)
        bar.setValue(int(PROGRESS_STEPS * min(done, total) / total))
        now = time.monotonic()
        if self._origin is None:
            self._origin = (now, done)
        t0, d0 = self._origin
        parts = [f"{what}: {megabytes(done)} of {megabytes(total)} MB"]
        if now - t0 > 0.5 and done > d0:
            rate = (done - d0) / (now - t0)
            parts += [f"{rate / 1e6:.1f} MB/s", eta_text((total - done) / rate)]
        return " · ".join(p for p in parts if p)
