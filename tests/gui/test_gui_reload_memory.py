"""A model reload lets the window, runtime, engine and model it replaced go (issue 60, defect 7):
each switch kept one more model in memory for the rest of the process (3.5 GB resident at start,
15.7 GB after five reloads). Real widgets and the launcher's own reload path, on tiny models."""

from __future__ import annotations

import dataclasses
import gc
import os
import weakref

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QApplication, QPlainTextEdit, QPushButton
from runtime_helpers import CONTEXT_ONLY, runtime_for

from draftscope.engine.engine import Engine
from draftscope.storage import HistoryStore, Settings

pytestmark = pytest.mark.usefixtures("own_data_and_cache", "one_thread")


def window_engine(tokenizer, seed: int) -> Engine:
    """A tiny real Llama with room for 4,096 positions, a fresh one for each load."""
    model = tiny_llama(len(tokenizer), seed=seed, layers=2, hidden=64, max_positions=4096)
    return Engine(model, tokenizer, name="tiny")


def send(qtbot, window, text: str) -> None:
    """An answer in the window, as a user asks for it, waited for."""
    window.findChild(QPlainTextEdit, "chatInput").setPlainText(text)
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):
        qtbot.mouseClick(window.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)


def test_reloads_let_the_replaced_windows_runtimes_and_models_go(qtbot, tokenizer, tmp_path):
    from draftscope.gui.launcher import Launcher

    loaded = []  # weak references to each load's (runtime, engine, model)

    def factory(settings, log=None):
        engine = window_engine(tokenizer, seed=len(loaded))
        runtime = runtime_for(engine, settings)
        loaded.append((weakref.ref(runtime), weakref.ref(engine), weakref.ref(engine.model)))
        return runtime

    settings = Settings(model="tiny-a", drafters=dict(CONTEXT_ONLY), max_new_tokens=8)
    launcher = Launcher(factory, HistoryStore(tmp_path / "h.sqlite3"), settings, settings_file=tmp_path / "s.json")
    windows = []
    try:
        with qtbot.waitSignal(launcher.window_ready, timeout=30_000) as ready:
            launcher.start()
        for model in ("tiny-b", "tiny-c"):  # two switches from the model switcher, each after an answer
            window = ready.args[0]
            windows.append(weakref.ref(window))
            send(qtbot, window, f"Hello before {model}")
            with qtbot.waitSignal(launcher.window_ready, timeout=30_000) as ready:
                window.model_chosen.emit(model)
            del window
        current = ready.args[0]
        del ready
        assert current.runtime.settings.model == "tiny-c"
        assert "Hello before tiny-c" in current.chat_view.toPlainText(), "the reload kept the conversation"
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)  # as the event loop would next
        gc.collect()
        for n, window in enumerate(windows):
            assert window() is None, f"window {n + 1}, replaced by a reload, is still alive"
        for n, (runtime, engine, model) in enumerate(loaded[:2]):
            assert runtime() is None, f"runtime {n + 1}, replaced by a reload, is still alive"
            assert engine() is None and model() is None, f"model {n + 1}, replaced by a reload, is still in memory"
        assert loaded[2][2]() is current.engine.model, "the model that runs is kept"
    finally:
        gc.unfreeze()  # the launcher's loader froze what was alive; the next tests collect as usual
        if launcher.window is not None:
            launcher.window.close()
        launcher.server.stop()


def test_a_settings_reload_frees_the_old_model_too(qtbot, tokenizer, tmp_path):
    """A setting that reloads the model (Context length) replaces the runtime as a switch does."""
    from draftscope.gui.launcher import Launcher

    loaded = []

    def factory(settings, log=None):
        engine = window_engine(tokenizer, seed=len(loaded))
        loaded.append(weakref.ref(engine.model))
        return runtime_for(engine, settings)

    settings = Settings(model="tiny-a", drafters=dict(CONTEXT_ONLY), max_new_tokens=8)
    launcher = Launcher(factory, HistoryStore(tmp_path / "h.sqlite3"), settings, settings_file=tmp_path / "s.json")
    try:
        with qtbot.waitSignal(launcher.window_ready, timeout=30_000):
            launcher.start()
        with qtbot.waitSignal(launcher.window_ready, timeout=30_000):
            launcher.apply_settings(dataclasses.replace(launcher.settings, context_length=2048))
        assert len(loaded) == 2, "the context length reloaded the model"
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
        gc.collect()
        assert loaded[0]() is None, "the model the settings change replaced is still in memory"
    finally:
        gc.unfreeze()
        if launcher.window is not None:
            launcher.window.close()
        launcher.server.stop()
