"""The chat's first page (offscreen Qt, a tiny real model): an empty conversation shows what the app
does and example prompts; a link puts its prompt in the message box (the file's question opens the
attach dialog); the page goes once the conversation has a message and comes back for a new one."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QFileDialog
from test_gui_attachments import make_window

from draftscope.gui.chat.welcome import EXAMPLES


def click(window, href: str) -> None:
    window.chat_view.anchorClicked.emit(QUrl(href))


def test_an_empty_conversation_welcomes_with_examples_that_fill_the_message_box(
    qtbot, chat_engine, tmp_path, monkeypatch
):
    w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3")
    page = w.chat_view.toPlainText()
    assert "drafting" in page and all(e.title in page for e in EXAMPLES)
    assert "action:example/0" in w.chat_view.toHtml()

    click(w, "action:example/0")
    assert w.chat_input.toPlainText() == EXAMPLES[0].prompt and "libary" in EXAMPLES[0].prompt

    asked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: (asked.append(a), ([], ""))[1])
    file_question = next(n for n, e in enumerate(EXAMPLES) if e.attach)
    click(w, f"action:example/{file_question}")
    assert asked and w.chat_input.toPlainText() == EXAMPLES[file_question].prompt

    w.chat_input.setPlainText("Hello")
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
        w.send()
    qtbot.waitUntil(lambda: not w.streaming, timeout=5000)
    assert EXAMPLES[0].title not in w.chat_view.toPlainText() and "Hello" in w.chat_view.toPlainText()
    w.new_conversation()
    assert EXAMPLES[0].title in w.chat_view.toPlainText()
