"""A documents folder chosen for a new conversation goes with its first message (offscreen Qt, a
tiny real model): Send while the folder is first indexed waits (the panel says so, nothing is
sent); once it is searchable the first message carries its passages and the conversation keeps it."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton
from test_gui_attachments import make_window


def test_the_first_message_waits_for_the_folder_and_carries_its_passages(qtbot, chat_engine, tmp_path, monkeypatch):
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "office.md").write_text("The office wifi password is kestrel-42.\n")
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    qtbot.mouseClick(w.findChild(QPushButton, "addDocumentsButton"), Qt.MouseButton.LeftButton)
    w.chat_input.setPlainText("What is the wifi password?")
    w.send()  # at once: the folder is being indexed
    assert w.conversation_id is None and w.chat_input.toPlainText() == "What is the wifi password?"
    assert "Send once it is searchable" in w.documents_panel.findChild(QLabel, "documentsStatus").text()

    qtbot.waitUntil(lambda: w.session.documents is not None, timeout=10_000)
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
        w.send()
    (question,) = [m for m in w.history.messages(w.conversation_id) if m.role == "user"]
    assert [f["name"] for f in question.files] == ["handbook (documents)"] and "kestrel-42" in question.files[0]["text"]
    assert w.history.documents(w.conversation_id) == str(folder)
