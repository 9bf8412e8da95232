"""The chat's own actions, through the widgets: highlighted code with a working Copy link,
regenerate, edit-and-resend, auto-scroll that pauses when the user scrolls up, and the
conversation list's rename / delete / search / export."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication, QLineEdit, QListWidget, QMessageBox, QPushButton
from runtime_helpers import runtime_for

from draftscope.engine.engine import Engine
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore

CODE_ANSWER = "Here it is:\n\n```python\ndef reverse(s):\n    return s[::-1]\n```\n\nDone."


def make_window(qtbot, engine, history, max_new_tokens=24):
    window = MainWindow(runtime_for(engine, max_new_tokens=max_new_tokens), history)
    qtbot.addWidget(window)
    window.show()
    return window


def seeded_history(tmp_path) -> tuple[HistoryStore, int]:
    history = HistoryStore(tmp_path / "h.sqlite3")
    conv = history.create_conversation("Reversing strings")
    history.add_message(conv, "user", "How do I reverse a string in Python?")
    history.add_message(
        conv,
        "assistant",
        CODE_ANSWER,
        stats={"tokens": 20, "tau": 1.5, "tokens_per_second": 12.0, "time_to_first_token_ms": 80.0},
    )
    return history, conv


def select(window, conversation_id):
    lst = window.findChild(QListWidget, "conversationList")
    for row in range(lst.count()):
        if lst.item(row).data(Qt.ItemDataRole.UserRole) == conversation_id:
            lst.setCurrentRow(row)
            return
    raise AssertionError(f"conversation {conversation_id} not listed")


def click_link(qtbot, view, href_prefix):
    """Click the first link whose target starts with ``href_prefix`` in a QTextBrowser, as a user
    would: find its text in the laid-out document, scroll it into view, click on it."""
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().isAnchor() and fragment.charFormat().anchorHref().startswith(href_prefix):
                inside = QTextCursor(view.document())
                inside.setPosition(fragment.position() + 1)
                view.setTextCursor(inside)
                view.ensureCursorVisible()
                rect = view.cursorRect(inside)
                qtbot.mouseClick(
                    view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.x() + 2, rect.center().y())
                )
                return
            it += 1
        block = block.next()
    raise AssertionError(f"no link to {href_prefix!r} in the chat")


def test_code_is_highlighted_and_its_copy_link_copies_it(qtbot, conversation_engine, tmp_path):
    history, conv = seeded_history(tmp_path)
    w = make_window(qtbot, conversation_engine, history)
    select(w, conv)
    html = w.chat_view.toHtml()
    assert "def" in w.chat_view.toPlainText() and "python" in w.chat_view.toPlainText()
    assert html.count("color:#") > 2, "code tokens carry pygments colours"
    QApplication.clipboard().clear()
    click_link(qtbot, w.chat_view, "copy:")
    qtbot.waitUntil(lambda: QApplication.clipboard().text() == "def reverse(s):\n    return s[::-1]\n", timeout=3000)
    click_link(qtbot, w.chat_view, "action:copy/")  # the first message's own Copy link
    qtbot.waitUntil(lambda: QApplication.clipboard().text() == "How do I reverse a string in Python?", timeout=3000)


def test_model_output_cannot_inject_html(qtbot, conversation_engine, tmp_path):
    history = HistoryStore(tmp_path / "h.sqlite3")
    conv = history.create_conversation("html")
    history.add_message(conv, "user", "hi")
    history.add_message(conv, "assistant", 'Click <a href="action:regenerate/1">here</a> <b>now</b>')
    w = make_window(qtbot, conversation_engine, history)
    select(w, conv)
    assert '<a href="action:regenerate/1">here</a>' in w.chat_view.toPlainText(), "raw HTML is shown as text"


def test_regenerate_answers_again_and_keeps_the_old_answer_as_a_version(qtbot, conversation_engine, tmp_path):
    history, conv = seeded_history(tmp_path)
    w = make_window(qtbot, conversation_engine, history)
    select(w, conv)
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
        qtbot.mouseClick(w.findChild(QPushButton, "regenerateButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.findChild(QPushButton, "sendButton").isEnabled(), timeout=5000)
    messages = history.messages(conv)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == "How do I reverse a string in Python?"
    assert messages[1].content != CODE_ANSWER and messages[1].stats["tokens"] > 0
    assert len(messages[1].versions) == 2 and "2 / 2" in w.chat_view.toPlainText()


def test_edit_and_resend_replaces_the_last_exchange(qtbot, conversation_engine, tmp_path):
    history, conv = seeded_history(tmp_path)
    w = make_window(qtbot, conversation_engine, history)
    select(w, conv)
    click_link(qtbot, w.chat_view, "action:edit/")
    assert w.chat_input.toPlainText() == "How do I reverse a string in Python?"
    assert w.findChild(QWidgetClass("QLabel"), "editBanner").isVisible()
    w.chat_input.setPlainText("How do I reverse a list?")
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
        qtbot.keyClick(w.chat_input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(history.messages(conv)) == 2, timeout=5000)
    messages = history.messages(conv)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == "How do I reverse a list?" and messages[1].content != CODE_ANSWER
    # what the window shows is the edited exchange, not the one it replaced (SQLite gives the new
    # messages the ids the old ones had)
    qtbot.waitUntil(lambda: not w.streaming, timeout=5000)
    shown = w.chat_view.toPlainText()
    assert "How do I reverse a list?" in shown and "How do I reverse a string in Python?" not in shown
    assert CODE_ANSWER.strip()[:20] not in shown, "the old answer is gone from the view"


def test_escape_cancels_an_edit(qtbot, conversation_engine, tmp_path):
    history, conv = seeded_history(tmp_path)
    w = make_window(qtbot, conversation_engine, history)
    select(w, conv)
    qtbot.mouseClick(w.findChild(QPushButton, "editButton"), Qt.MouseButton.LeftButton)
    assert w.editing_message_id is not None
    qtbot.keyClick(w.chat_input, Qt.Key.Key_Escape)
    assert w.editing_message_id is None and w.chat_input.toPlainText() == ""
    assert len(history.messages(conv)) == 2, "cancelling an edit changes nothing"


def QWidgetClass(name):
    from PySide6 import QtWidgets

    return getattr(QtWidgets, name)


def test_auto_scroll_pauses_when_the_user_scrolls_up(qtbot, conversation_engine, tmp_path):
    history = HistoryStore(tmp_path / "h.sqlite3")
    conv = history.create_conversation("long")
    for i in range(12):
        history.add_message(conv, "user", f"question {i}")
        history.add_message(conv, "assistant", f"answer {i}\n\n" + "words " * 20)
    long_engine = Engine(conversation_engine.model, conversation_engine.tokenizer, name="tiny")
    long_engine.eos_ids = set()
    w = make_window(qtbot, long_engine, history, max_new_tokens=400)
    select(w, conv)
    bar = w.chat_view.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum(), "a selected conversation opens at its end"
    w.chat_input.setPlainText("and now?")
    with qtbot.waitSignal(w.answer_signals.steps, timeout=30_000):
        w.send()
    bar.setValue(bar.maximum() // 3)  # the user scrolls up to read
    held = bar.value()
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=120_000):
        pass
    qtbot.waitUntil(lambda: not w.streaming, timeout=5000)  # the window has handled the end too
    assert abs(bar.value() - held) <= 4, "the view stayed where the user put it"
    bar.setValue(bar.maximum())  # back at the end: following resumes
    w.chat_input.setPlainText("more")
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=120_000):
        w.send()
    qtbot.waitUntil(lambda: not w.streaming, timeout=5000)
    assert bar.value() == bar.maximum()


def test_rename_delete_search_and_export(qtbot, conversation_engine, tmp_path, monkeypatch):
    history, conv = seeded_history(tmp_path)
    other = history.create_conversation("Shopping list")
    history.add_message(other, "user", "milk, eggs, bread")
    w = make_window(qtbot, conversation_engine, history)
    lst = w.findChild(QListWidget, "conversationList")
    assert lst.count() == 2

    # search filters by message text, not only titles
    search = w.findChild(QLineEdit, "conversationSearch")
    qtbot.keyClicks(search, "eggs")
    assert [lst.item(i).text() for i in range(lst.count())] == ["Shopping list"]
    search.clear()
    assert lst.count() == 2

    # rename in place (F2 / double-click edits the item)
    select(w, conv)
    item = lst.currentItem()
    item.setText("String reversal")
    assert history.conversation(conv).title == "String reversal"
    item.setText("   ")  # an empty title is refused and the old one comes back
    assert history.conversation(conv).title == "String reversal" and item.text() == "String reversal"

    # export to Markdown through the menu action (the file dialog answers with a path)
    out = tmp_path / "export.md"
    monkeypatch.setattr("PySide6.QtWidgets.QFileDialog.getSaveFileName", lambda *a, **k: (str(out), "Markdown (*.md)"))
    w.export_action.trigger()
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# String reversal") and "return s[::-1]" in text and "20 tokens" in text

    # delete asks first; "No" keeps it, "Yes" removes it and its messages
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    w.delete_action.trigger()
    assert history.conversation(conv) is not None
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    w.delete_action.trigger()
    assert history.conversation(conv) is None and history.messages(conv) == []
    assert [lst.item(i).text() for i in range(lst.count())] == ["Shopping list"]
    assert w.conversation_id is None and "reverse" not in w.chat_view.toPlainText()


def test_export_failure_is_reported_not_raised(qtbot, conversation_engine, tmp_path, monkeypatch):
    history, conv = seeded_history(tmp_path)
    w = make_window(qtbot, conversation_engine, history)
    select(w, conv)
    warnings = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text: warnings.append(text))
    w.conversations.export(conv, tmp_path / "no-such-folder" / "x.md")
    assert warnings and "could not be exported" in warnings[0] and "no-such-folder" in warnings[0]


def test_qt_bindings_do_not_leak_references_to_true_or_none(qtbot):
    """PySide6 6.12.0 drops a reference to True on every emit and to None on most calls; on Python
    3.11 the app then aborts after some minutes of streaming. The pinned bindings must not."""
    import sys

    from PySide6.QtCore import QObject, Signal

    class Emitter(QObject):
        fired = Signal(int)

    emitter = Emitter()
    emitter.fired.connect(lambda _: None)
    before = sys.getrefcount(True), sys.getrefcount(None)
    for _ in range(2000):
        emitter.fired.emit(1)
        emitter.setObjectName("x")
    after = sys.getrefcount(True), sys.getrefcount(None)
    assert after[0] >= before[0] - 50 and after[1] >= before[1] - 50, f"references lost: {before} -> {after}"


def test_a_prompt_longer_than_the_context_is_reported_and_the_question_given_back(qtbot, conversation_engine, tmp_path):
    history = HistoryStore(tmp_path / "h.sqlite3")
    w = make_window(qtbot, conversation_engine, history)
    w.chat_input.setPlainText("word " * 6000)  # far beyond the tiny model's 4,096 positions
    w.send()
    qtbot.waitUntil(lambda: w.error_box is not None and w.error_box.isVisible(), timeout=30_000)
    assert "18,014 tokens" in w.error_box.text() and "start a new one" in w.error_box.text()
    assert not w.streaming and w.findChild(QPushButton, "sendButton").isEnabled()
    # the question is back in the box to shorten or send elsewhere, and out of the conversation,
    # so the next message is not refused for it again
    assert w.chat_input.toPlainText() == ("word " * 6000).strip()
    assert [m.role for m in history.messages(w.conversation_id)] == []


def test_shift_enter_breaks_the_line_and_enter_sends(qtbot, conversation_engine, tmp_path):
    history = HistoryStore(tmp_path / "h.sqlite3")
    w = make_window(qtbot, conversation_engine, history, max_new_tokens=4)
    qtbot.keyClicks(w.chat_input, "first line")
    qtbot.keyClick(w.chat_input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(w.chat_input, "second line")
    assert w.chat_input.toPlainText() == "first line\nsecond line" and w.conversation_id is None
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
        qtbot.keyClick(w.chat_input, Qt.Key.Key_Return)
    assert history.messages(w.conversation_id)[0].content == "first line\nsecond line"
    assert w.chat_input.toPlainText() == ""


def test_a_conversation_opens_on_a_click_and_renames_on_a_double_click(qtbot, conversation_engine, tmp_path):
    """Picking a conversation opens it without rebuilding the list under the mouse, so the
    double-click that follows starts renaming it in place."""
    from PySide6.QtWidgets import QAbstractItemView

    history, first = seeded_history(tmp_path)
    second = history.create_conversation("another one")
    history.add_message(second, "user", "a second question")
    w = make_window(qtbot, conversation_engine, history)
    w.show()
    listing = w.findChild(QListWidget, "conversationList")
    row = next(i for i in range(listing.count()) if listing.item(i).data(Qt.ItemDataRole.UserRole) == first)
    item = listing.item(row)
    centre = listing.visualItemRect(item).center()
    qtbot.mouseClick(listing.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    assert w.conversation_id == first and listing.item(row) is item, "opened, the list left as it was"
    qtbot.mouseDClick(listing.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    qtbot.waitUntil(lambda: listing.state() == QAbstractItemView.State.EditingState, timeout=3000)
