"""Files attached in the window (offscreen Qt, real widgets, a tiny real model): by the Attach
button and by a real drop event on the chat, each a chip with its size in tokens; a chip removed
before sending is not sent; the sent message shows its file, also after the app restarts, and its
link opens the text the model read; a file that cannot be read is said and nothing else is lost;
a slow file is read on a worker while the window responds, and Cancel stops it; hostile Word
files attach or say why."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QWidget,
)
from runtime_helpers import runtime_for

from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore


def make_window(qtbot, engine, db):
    window = MainWindow(runtime_for(engine, max_new_tokens=6), HistoryStore(db))
    qtbot.addWidget(window)
    window.show()
    return window


def drop_files(widget, paths) -> None:
    """A real drag of local files onto ``widget`` and its drop (what a file manager sends; Qt
    delivers a drop only to a widget the drag entered and that accepted it)."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    buttons, none = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, buttons, none)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted(), "the widget takes file drops"
    QApplication.sendEvent(widget, QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, buttons, none))


def test_attach_by_button_and_drop_remove_one_send_and_see_it_after_a_restart(
    qtbot, chat_engine, tmp_path, monkeypatch
):
    notes, todo, extra = tmp_path / "notes.md", tmp_path / "todo.txt", tmp_path / "extra.txt"
    notes.write_text("# Notes\nThe meeting is on Friday at noon.\n")
    todo.write_text("fix the fence\nbuy milk\n")
    extra.write_text("not wanted\n")
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(notes), str(extra)], ""))
    qtbot.mouseClick(w.findChild(QPushButton, "attachButton"), Qt.MouseButton.LeftButton)
    drop_files(w.chat_view.viewport(), [todo])
    chips = w.composer.chips
    qtbot.waitUntil(lambda: len(chips.files) == 3, timeout=30_000)  # read on a worker, in the order given
    assert [f.name for f in chips.files] == ["notes.md", "extra.txt", "todo.txt"]
    assert len(chips.chips()) == 3 and chips.isVisible()
    size = len(chat_engine.tokenizer(notes.read_text().strip(), add_special_tokens=False)["input_ids"])
    assert chips.chips()[0].findChild(QLabel).text() == f"notes.md · {size:,} tokens"
    qtbot.mouseClick(chips.chips()[1].findChild(QToolButton, "removeAttachment"), Qt.MouseButton.LeftButton)
    assert [f.name for f in chips.files] == ["notes.md", "todo.txt"], "the removed chip is not sent"

    w.findChild(QPlainTextEdit, "chatInput").setPlainText("When is the meeting?")
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
        qtbot.mouseClick(w.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.findChild(QPushButton, "sendButton").isEnabled(), timeout=5000)
    assert not chips.files and not chips.isVisible(), "sent: the chips are gone"
    user = w.history.messages(w.conversation_id)[0]
    assert [f["name"] for f in user.files] == ["notes.md", "todo.txt"]
    assert "notes.md" in w.chat_view.toPlainText() and "todo.txt" in w.chat_view.toPlainText()
    assert "extra.txt" not in w.chat_view.toPlainText()
    conversation = w.conversation_id
    w.close()

    again = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")  # the app restarted
    again.show_conversation(conversation)
    assert "notes.md" in again.chat_view.toPlainText()
    again.chat_view._on_link(QUrl(f"attachment:{user.id}/0"))
    dialog = again.chat_view.file_dialog
    assert dialog.isVisible() and "The meeting is on Friday at noon." in dialog.findChild(QPlainTextEdit).toPlainText()
    dialog.close()


def test_a_file_that_cannot_be_read_is_said_and_the_message_is_kept(qtbot, chat_engine, tmp_path):
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "ok.txt").write_text("fine\n")
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    box = w.findChild(QPlainTextEdit, "chatInput")
    box.setPlainText("half-written question")
    drop_files(box.viewport(), [tmp_path / "blob.bin", tmp_path / "ok.txt"])
    qtbot.waitUntil(lambda: w.error_box is not None and w.error_box.isVisible(), timeout=5000)
    assert w.error_box.objectName() == "attachErrorDialog" and "blob.bin is a binary file" in w.error_box.text()
    assert box.toPlainText() == "half-written question", "the drop did not paste a path into the message"
    assert [f.name for f in w.composer.chips.files] == ["ok.txt"], "the readable file is attached"


def test_a_slow_file_is_read_on_a_worker_while_the_window_responds_and_cancel_stops_it(qtbot, chat_engine, tmp_path):
    """A small PDF whose pages take its parser seconds each: the drop returns at once, a row says
    it is being read, the event loop keeps running (a timer ticks, typing reaches the box), Send
    waits for the file rather than going without it, and Cancel ends the read: no chip, no error."""
    from hostile_files import looping_pdf
    from PySide6.QtCore import QTimer

    (tmp_path / "drawing.pdf").write_bytes(looping_pdf(pages=200))  # most of an hour, were it read whole
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    box = w.findChild(QPlainTextEdit, "chatInput")
    started = time.monotonic()
    drop_files(box.viewport(), [tmp_path / "drawing.pdf"])
    assert time.monotonic() - started < 2, "the drop returned without reading the file"
    row = w.findChild(QWidget, "attachmentReading")
    assert row.isVisible() and "Reading drawing.pdf" in row.findChild(QLabel, "attachmentReadingLabel").text()
    ticks = []
    timer = QTimer(w, interval=20)
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start()
    qtbot.waitUntil(lambda: len(ticks) >= 10, timeout=5000)  # the UI thread is free while the file is read
    qtbot.keyClicks(box, "what is drawn?")
    assert box.toPlainText() == "what is drawn?" and w.composer.reader.reading
    qtbot.mouseClick(w.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    assert box.toPlainText() == "what is drawn?" and not w.history.conversations(), "Send waits for the file"
    assert "Send once it is attached" in row.findChild(QLabel, "attachmentReadingLabel").text()
    qtbot.mouseClick(w.findChild(QPushButton, "cancelAttachButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.composer.reader.reading and not row.isVisible(), timeout=5000)
    assert not w.composer.chips.files and w.error_box is None, "cancelled: nothing attached, nothing to say"
    assert len(ticks) >= 10 and box.toPlainText() == "what is drawn?"


def test_send_pressed_before_the_worker_names_the_file_still_says_it_waits(qtbot, tmp_path):
    """Send pressed at once after a drop: the worker's word naming the file came after it and wiped
    "Send once it is attached", so the user saw no reason why nothing was sent."""
    from hostile_files import looping_pdf

    from draftscope.gui.chat.attachments import AttachmentReader

    for name in ("a.pdf", "b.pdf"):
        (tmp_path / name).write_bytes(looping_pdf(pages=200))
    reader = AttachmentReader()
    qtbot.addWidget(reader)
    reader.read_paths([str(tmp_path / "a.pdf"), str(tmp_path / "b.pdf")])
    reader.say_send_waits()  # before the event loop delivers the worker's "(1 of 2)"
    qtbot.waitUntil(lambda: "(1 of 2)" in reader.label.text(), timeout=5000)
    assert reader.label.text().endswith("Send once it is attached"), reader.label.text()
    reader.cancel()
    qtbot.waitUntil(lambda: not reader.reading, timeout=5000)
    reader.read_paths([str(tmp_path / "a.pdf")])  # a later reading: nothing was waiting to be sent
    assert "Send once" not in reader.label.text()
    reader.cancel()
    qtbot.waitUntil(lambda: not reader.reading, timeout=5000)


def test_a_word_table_python_docx_cannot_lay_out_attaches_and_a_bomb_says_why(qtbot, chat_engine, tmp_path):
    """Issue 60: a Word table that made python-docx raise outside the reader's errors used to make
    the attach silently do nothing; a DOCX bomb is refused with its name and the limit."""
    from hostile_files import first_row_merged_down, with_member, word_document

    (tmp_path / "minutes.docx").write_bytes(first_row_merged_down(word_document()))
    (tmp_path / "bomb.docx").write_bytes(with_member(word_document(), "word/document.xml", padding=100 << 20))
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    drop_files(w.chat_view.viewport(), [tmp_path / "minutes.docx", tmp_path / "bomb.docx"])
    qtbot.waitUntil(lambda: w.error_box is not None and w.error_box.isVisible(), timeout=30_000)
    assert "bomb.docx would unpack its part word/document.xml to 100 MB" in w.error_box.text()
    assert [f.name for f in w.composer.chips.files] == ["minutes.docx"]
    assert "owner | Dana" in w.composer.chips.files[0].text


def test_conversations_are_exported_and_imported_from_the_file_menu(qtbot, chat_engine, tmp_path, monkeypatch):
    from history_fixtures import chatgpt_export, filled
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QMessageBox

    filled(tmp_path / "h.sqlite3").close()
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "all.json"), ""))
    w.findChild(QAction, "exportAllAction").trigger()
    assert (tmp_path / "all.json").exists()
    (tmp_path / "conversations.json").write_text(__import__("json").dumps(chatgpt_export()))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(tmp_path / "conversations.json"), ""))
    w.findChild(QAction, "importAction").trigger()
    titles = [w.conversation_list.item(i).text() for i in range(w.conversation_list.count())]
    assert "Trip to Lisbon" in titles and len(titles) == 3
    warned = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a: warned.append(a[2]))
    (tmp_path / "conversations.json").write_text('[{"mapping": ')
    w.findChild(QAction, "importAction").trigger()
    assert warned and "nothing was imported" in warned[0] and w.conversation_list.count() == 3


def test_a_conversation_keeps_its_documents_folder_and_answers_from_it(qtbot, chat_engine, tmp_path, monkeypatch):
    """Documents ▸ Add folder…: indexed in the background with progress, the next message carries
    the passages that answer it (named by file and lines), the folder stays with the conversation
    (another conversation has none; coming back brings it), and a changed file is read again."""
    import time

    from PySide6.QtWidgets import QLabel as Label

    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "office.md").write_text("The office wifi password is kestrel-42.\n\nLunch is at noon.\n")
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    panel = w.documents_panel
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    qtbot.mouseClick(w.findChild(QPushButton, "addDocumentsButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.session.documents is not None, timeout=10_000)
    assert panel.findChild(Label, "documentsStatus").text().startswith("1 files searchable")
    w.findChild(QPlainTextEdit, "chatInput").setPlainText("What is the wifi password?")
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
        qtbot.mouseClick(w.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    conversation = w.conversation_id
    user = w.history.messages(conversation)[0]
    assert [f["name"] for f in user.files] == ["handbook (documents)"]
    assert "kestrel-42" in user.files[0]["text"] and user.files[0]["passages"] == ["office.md, lines 1-3"]
    assert w.history.documents(conversation) == str(folder)
    w.new_conversation()
    assert w.session.documents is None and panel.folder is None
    w.show_conversation(conversation)
    qtbot.waitUntil(lambda: w.session.documents is not None, timeout=10_000)
    (folder / "office.md").write_text("The office wifi password is osprey-7.\n")
    os.utime(folder / "office.md", (time.time() + 5, time.time() + 5))
    panel.recheck.setInterval(50)
    panel.recheck.start()
    qtbot.waitUntil(
        lambda: (
            bool(panel.index.search("wifi password", 500, lambda t: len(t.split())))
            and "osprey-7" in panel.index.search("wifi password", 500, lambda t: len(t.split()))[0].text
        ),
        timeout=10_000,
    )
