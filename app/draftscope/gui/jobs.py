"""The one pattern for background jobs in the GUI (downloads, datastore builds, training): a
``JobWorker`` on its own thread runs ``job(report, status)``; the dialog polls what it reported on a
timer (``take``) and ends the thread with ``end_job_thread`` when it closes. Also the widgets every
job dialog shows: a wrapping label, a note, a progress row, the time left in words."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from draftscope.gui.worker import WorkerThread

POLL_INTERVAL_S = 0.05  # progress repaints ~20 times a second
PROGRESS_STEPS = 1000  # progress bars count in permille: byte counts overflow a Qt int
_STRAGGLERS: list[WorkerThread] = []  # worker threads still finishing a cancelled job


def end_job_thread(thread: WorkerThread) -> None:
    """End a job's thread as its dialog closes; one still running a job that ignores its cancel is
    kept alive here, since destroying a running QThread aborts the process."""
    thread.shutdown(10_000)
    if thread.thread.isRunning():
        _STRAGGLERS.append(thread)


class JobWorker(QObject):
    """Runs one job at a time on its thread: ``job(report, status)``. The job's reports land in
    attributes that the dialog polls on a timer, so a fast stream of progress costs no signal
    emissions (PySide6 6.12.0 on Python < 3.12 leaks a reference to True on every Python-side emit)."""

    def __init__(self) -> None:
        super().__init__()
        self.job = None
        self._lock = threading.Lock()
        self._progress = self._status = self._outcome = None

    @Slot()
    def run(self) -> None:
        try:
            outcome = ("done", self.job(self._report, self._set_status))
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



def wrapping_label(text: str = "", *, objectName: str = "") -> QLabel:
    label = QLabel(text, objectName=objectName)
    label.setWordWrap(True)
    return label


def note(text: str) -> QLabel:
    """Smaller, dimmer explanatory text."""
    label = wrapping_label(text)
    label.setStyleSheet("color: palette(placeholder-text);")
    return label


def indented(widget: QWidget) -> QWidget:
    box = QWidget()
    layout = QHBoxLayout(box)
    layout.setContentsMargins(24, 0, 0, 0)
    layout.addWidget(widget)
    return box


def progress_row(bar: QProgressBar, cancel: QPushButton) -> QWidget:
    row = QWidget()
    policy = row.sizePolicy()
    policy.setRetainSizeWhenHidden(True)  # the page keeps its height when a download starts or ends
    row.setSizePolicy(policy)
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(bar, 1)
    layout.addWidget(cancel)
    return row


def megabytes(n: int) -> str:
    return f"{n / 1e6:,.1f}"


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


def eta_text(seconds: float) -> str:
    if seconds < 1:
        return ""
    if seconds < 90:
        return f"about {seconds:.0f} s left"
    return f"about {seconds / 60:.0f} min left"
