"""The one job runner every dialog uses (downloads, datastore builds, training): a job reports
progress and status to the UI thread, ends in done or failed, a cancel reaches the job and stops its
reports, and closing the dialog mid-job ends the thread without a hang or a late callback."""

import threading
import time

import pytest

pytest.importorskip("PySide6")

from PySide6.QtWidgets import QWidget

from draftscope.gui.jobs import JobRunner


class Heard:
    def __init__(self) -> None:
        self.progress, self.status, self.done, self.failed = [], [], [], []
        self.threads = set()

    def runner(self, parent) -> JobRunner:
        def note(where):
            def hear(value):
                self.threads.add(threading.current_thread() is threading.main_thread())
                where.append(value)

            return hear

        return JobRunner(
            parent,
            on_progress=note(self.progress),
            on_status=note(self.status),
            on_done=note(self.done),
            on_failed=note(self.failed),
        )


@pytest.fixture
def dialog(qtbot):
    w = QWidget()
    qtbot.addWidget(w)
    return w


def test_a_job_reports_on_the_ui_thread_and_ends_done(qtbot, dialog):
    heard = Heard()
    runner = heard.runner(dialog)
    ran_on = []

    def job(report, status, cancel):
        ran_on.append(threading.current_thread() is threading.main_thread())
        status("working")
        report(0.5)
        time.sleep(0.2)  # the poll sees the reports before the outcome
        return "result"

    assert runner.start(job)
    assert not runner.start(job), "one job at a time"
    qtbot.waitUntil(lambda: bool(heard.done), timeout=5000)
    assert ran_on == [False], "the job ran off the UI thread"
    assert heard.status == ["working"] and heard.progress == [0.5] and heard.done == ["result"]
    assert heard.threads == {True}, "every callback ran on the UI thread"
    assert not runner.running and not runner.cancelled
    assert runner.start(lambda report, status, cancel: 1), "a second job after the first"
    qtbot.waitUntil(lambda: heard.done == ["result", 1], timeout=5000)


def test_a_failing_job_hands_its_exception_to_the_dialog(qtbot, dialog):
    heard = Heard()
    runner = heard.runner(dialog)

    def job(report, status, cancel):
        raise OSError("disk full")

    runner.start(job)
    qtbot.waitUntil(lambda: bool(heard.failed), timeout=5000)
    assert isinstance(heard.failed[0], OSError) and str(heard.failed[0]) == "disk full" and not heard.done


def test_cancel_reaches_the_job_and_silences_its_reports(qtbot, dialog):
    heard = Heard()
    runner = heard.runner(dialog)
    started = threading.Event()

    def job(report, status, cancel):
        started.set()
        while not cancel.cancelled:
            time.sleep(0.01)
        report(0.9)  # after the cancel: never shown
        raise RuntimeError("cancelled")

    runner.start(job)
    assert started.wait(5)
    assert runner.cancel() and not runner.cancel(), "the first cancel counts"
    qtbot.waitUntil(lambda: bool(heard.failed), timeout=5000)
    assert runner.cancelled and heard.progress == [], "the dialog says Cancelling …, not a stale figure"


def test_closing_mid_job_ends_the_thread_without_late_callbacks(qtbot, dialog):
    heard = Heard()
    runner = heard.runner(dialog)
    started, stopped = threading.Event(), threading.Event()

    def job(report, status, cancel):
        started.set()
        while not cancel.cancelled:
            time.sleep(0.01)
        stopped.set()
        return "late"

    runner.start(job)
    assert started.wait(5)
    t = time.monotonic()
    runner.close()
    assert stopped.wait(5) and time.monotonic() - t < 5
    assert not runner.running and not runner.start(job), "a closed runner starts nothing"
    qtbot.wait(200)
    assert heard.done == [] and heard.failed == [], "nothing reaches a closed dialog"


@pytest.fixture
def short_shutdown(monkeypatch):
    """Threads end after at most 0.3 s of waiting (the code waits up to 10 s for a job to heed its
    cancel); a wait asked to be shorter, or forever, is left as asked."""
    from draftscope.gui.generation_worker import WorkerThread

    shutdown = WorkerThread.shutdown

    def short(self, timeout_ms=5000):
        shutdown(self, min(timeout_ms, 300) if timeout_ms >= 0 else timeout_ms)

    monkeypatch.setattr(WorkerThread, "shutdown", short)


def test_closing_mid_job_that_ignores_its_cancel_neither_hangs_nor_aborts(qtbot, dialog, short_shutdown):
    """A job deaf to Cancel (a blocking read, a C library call): close returns once the wait is up,
    the thread runs on in _STRAGGLERS (a QThread destroyed while running aborts the process), and
    what the job says or returns afterwards never reaches the closed dialog."""
    from draftscope.gui import jobs

    heard = Heard()
    runner = heard.runner(dialog)
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def job(report, status, cancel):
        started.set()
        release.wait(4)  # ignores the cancel; ends when the test lets it (or, whatever happens, within 4 s)
        report(0.9)
        status("still here")
        ended.set()
        return "late"

    runner.start(job)
    assert started.wait(5)
    worker_thread = runner._thread  # held here too, so a thread the runner dropped cannot abort the run
    try:
        t = time.monotonic()
        runner.close()
        took = time.monotonic() - t
        assert took < 2, f"close waited {took:.1f} s for a job that ignores its cancel"
        assert not ended.is_set() and worker_thread.thread.isRunning(), "the job still runs"
        assert worker_thread in jobs._STRAGGLERS, "the running thread is kept alive, not destroyed"
        assert not runner.running and runner.cancelled
        release.set()
        assert ended.wait(5)
        assert worker_thread.thread.wait(5000), "the straggler's thread ends with its job"
        qtbot.wait(300)  # several poll intervals
        assert (heard.progress, heard.status, heard.done, heard.failed) == ([], [], [], []), (
            "nothing reaches a closed dialog"
        )
    finally:
        release.set()
        worker_thread.thread.wait(5000)
        if worker_thread in jobs._STRAGGLERS:
            jobs._STRAGGLERS.remove(worker_thread)


def test_quitting_the_application_closes_a_runner_whose_dialog_stayed_open(qtbot, dialog, monkeypatch):
    """The runner closes itself on QApplication.aboutToQuit: the job is cancelled and its thread
    ends though the dialog was never closed. (A stand-in application: emitting the real
    aboutToQuit would reach every window and server the other tests left connected to it.)"""
    from PySide6.QtCore import QObject, Signal

    from draftscope.gui import jobs

    class App(QObject):
        aboutToQuit = Signal()

    app = App()
    monkeypatch.setattr(jobs, "QApplication", type("QApplication", (), {"instance": staticmethod(lambda: app)}))
    heard = Heard()
    runner = heard.runner(dialog)
    started, stopped = threading.Event(), threading.Event()

    def job(report, status, cancel):
        started.set()
        deadline = time.monotonic() + 4
        while not cancel.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped.set()
        return "late"

    runner.start(job)
    assert started.wait(5)
    worker_thread = runner._thread
    app.aboutToQuit.emit()
    try:
        assert stopped.is_set() and runner.cancelled, "the quit cancelled the job"
        assert not runner.running and worker_thread.thread.isFinished(), "and ended its thread"
        assert not runner.start(job), "a closed runner starts nothing"
        qtbot.wait(200)
        assert heard.done == [] and heard.failed == []
    finally:
        runner.close()
        worker_thread.thread.wait(5000)
