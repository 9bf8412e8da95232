"""Quitting the window saves the conversation's cache where caches are kept on disk (issue 61): the
next start restores it instead of reading the conversation again."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtWidgets import QPushButton
from test_gui_chat import make_window, send

from draftscope.engine.kv_disk import KvDiskStore, cache_files


def test_quitting_the_window_saves_the_conversation_for_the_next_start(qtbot, chat_engine, tmp_path):
    folder = tmp_path / "kv"
    chat_engine.backend.keep_on_disk(KvDiskStore(folder, 10**8, min_save=16, min_gain=8))
    try:
        w = make_window(qtbot, chat_engine, tmp_path / "h.sqlite3", max_new_tokens=8)
        with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000):
            send(qtbot, w, "Tell me about the boiler's service interval and its warranty, please.")
        qtbot.waitUntil(lambda: w.findChild(QPushButton, "sendButton").isEnabled(), timeout=5000)
        before = set(cache_files(folder))  # what an earlier test left in the shared engine's slot
        w.close()
        assert len(set(cache_files(folder)) - before) == 1, "quitting saved the conversation"
    finally:
        chat_engine.backend.keep_on_disk(None)
