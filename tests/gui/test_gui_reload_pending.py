"""A reload (a model switch, a setting that reloads the model) rebuilds the window: what a new
conversation was given before its first message, in no history yet, goes to the new window with its
shape (offscreen Qt, the launcher's own reload path, tiny models). And Settings ▸ Threads says what
Automatic chose for the model that runs."""

from __future__ import annotations

import gc
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton
from runtime_helpers import CONTEXT_ONLY, runtime_for
from test_gui_reload_memory import send, window_engine

from draftscope.engine.auto_threads import ThreadsChoice
from draftscope.storage import HistoryStore, Settings

pytestmark = pytest.mark.usefixtures("own_data_and_cache", "one_thread")


@pytest.fixture
def launcher(qtbot, tokenizer, tmp_path):
    from draftscope.gui.launcher import Launcher

    loads = []

    def factory(settings, log=None):
        loads.append(settings.model)
        return runtime_for(window_engine(tokenizer, seed=len(loads)), settings)

    settings = Settings(model="tiny-a", drafters=dict(CONTEXT_ONLY), max_new_tokens=4, read_ahead=False)
    launcher = Launcher(factory, HistoryStore(tmp_path / "h.sqlite3"), settings, settings_file=tmp_path / "s.json")
    with qtbot.waitSignal(launcher.window_ready, timeout=30_000):
        launcher.start()
    yield launcher
    gc.unfreeze()  # the launcher's loader froze what was alive; the next tests collect as usual
    if launcher.window is not None:
        launcher.window.close()
    launcher.server.stop()


def test_a_new_conversations_folder_survives_a_reload_and_goes_with_its_first_message(
    qtbot, launcher, tmp_path, monkeypatch
):
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "office.md").write_text("The office wifi password is kestrel-42.\n")
    before = launcher.window
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    qtbot.mouseClick(before.findChild(QPushButton, "addDocumentsButton"), Qt.MouseButton.LeftButton)
    assert before.conversation_id is None and before.documents_panel.folder == str(folder)

    with qtbot.waitSignal(launcher.window_ready, timeout=30_000) as ready:
        before.model_chosen.emit("tiny-b")  # the switcher: a reload, a new window
    window = ready.args[0]
    assert window is not before and window.runtime.settings.model == "tiny-b"
    assert window.conversation_id is None
    assert window.documents_panel.folder == str(folder), "the folder chosen before the reload was dropped"
    assert str(folder) in window.documents_panel.findChild(QLabel, "documentsLabel").text()

    qtbot.waitUntil(lambda: window.session.documents is not None, timeout=20_000)  # searchable
    send(qtbot, window, "What is the wifi password?")
    assert window.history.documents(window.conversation_id) == str(folder), "the conversation did not keep it"
    (question,) = [m for m in window.history.messages(window.conversation_id) if m.role == "user"]
    assert "kestrel-42" in question.files[0]["text"]


def test_a_written_conversations_folder_is_its_own_not_carried(qtbot, launcher, tmp_path, monkeypatch):
    """Once a conversation has a message its folder lives in the history: the new window reopens that
    conversation with it, and a folder is never given to a conversation it was not chosen for."""
    before = launcher.window
    send(qtbot, before, "Hello")
    with qtbot.waitSignal(launcher.window_ready, timeout=30_000) as ready:
        before.model_chosen.emit("tiny-b")
    window = ready.args[0]
    assert window.conversation_id == before.conversation_id and window.documents_panel.folder is None


def test_settings_threads_says_what_automatic_chose(qtbot, launcher):
    from draftscope.gui.threads_choice import ThreadsCombo

    launcher.window.runtime.engine.threads_choice = ThreadsChoice(1, {2: 0.012, 1: 0.010})  # as measure() leaves it
    launcher.open_settings()
    combo = launcher.settings_dialog.findChild(ThreadsCombo)
    qtbot.addWidget(launcher.settings_dialog)
    assert combo.itemText(combo.findData(0)) == "Automatic (chose 1: 20% faster than 2)"
    assert combo.value() == launcher.settings.threads, "the label changed the setting"
    launcher.settings_dialog.reject()
