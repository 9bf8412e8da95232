"""The app learns from the model's own answers: each answer is indexed in the background (the UI
keeps responding while a large corpus is re-indexed), the status bar says how much was learned,
the next answer drafts from it, switching it off records nothing, and Forget clears it."""

import dataclasses
import time

import numpy as np
import pytest

pytest.importorskip("PySide6")

from engine_fixtures import pin_budget, tiny_llama
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QPushButton
from runtime_helpers import GREEDY

from draftscope.core.runtime import Runtime
from draftscope.drafters.learned import LearnedStore
from draftscope.engine.engine import Engine
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore, Settings


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=5, layers=2, hidden=64)


def window_for(qtbot, model, tokenizer, tmp_path, settings, store):
    engine = pin_budget(Engine(model, tokenizer, name="tiny"))
    engine.eos_ids = set()
    w = MainWindow(Runtime(settings, engine, learned=store), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(w)
    w.show()
    return w


def ask(qtbot, w, text):
    w.findChild(QPlainTextEdit, "chatInput").setPlainText(text)
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000) as done:
        qtbot.mouseClick(w.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    return done.args[0]


def test_an_answer_is_learned_without_blocking_the_ui_and_drafts_the_next(qtbot, model, tokenizer, tmp_path):
    store = LearnedStore("tiny", len(tokenizer), tmp_path / "learned")
    rng = np.random.default_rng(0)
    for _ in range(400):  # a long history already learned: ~0.6M tokens to re-index after each answer
        store.add([1, 2], rng.integers(0, len(tokenizer), 1500).tolist())
    store.rebuild()
    settings = Settings(  # greedy: the same question gives the same answer, which the learned index drafts
        **{**GREEDY, "max_new_tokens": 48},
        drafters={"retrieval": False, "learned": True, "context": False, "model": False},
    )
    w = window_for(qtbot, model, tokenizer, tmp_path, settings, store)
    label = w.findChild(QLabel, "statusLearned")
    assert label.text() == "learned: 400 answers" and "from 400 answers, 0.6M tokens" in label.toolTip()

    lateness, last = [], [time.perf_counter()]

    def tick():
        now = time.perf_counter()
        lateness.append((now - last[0]) * 1000 - 10)
        last[0] = now

    timer = QTimer(interval=10)
    timer.timeout.connect(tick)
    timer.start()  # from the question on: the answer streams, then is indexed
    first = ask(qtbot, w, "Tell me something")
    started = time.perf_counter()
    qtbot.waitUntil(lambda: label.text() == "learned: 401 answers", timeout=30_000)
    timer.stop()
    indexing_ms = (time.perf_counter() - started) * 1000
    worst = max(lateness[1:], default=0.0)
    print(
        f"re-indexing 401 answers: done {indexing_ms:.0f} ms after the answer; UI timer late by {worst:.1f} ms at worst "
        f"over {len(lateness)} ticks"
    )
    assert len(lateness) >= 3, "the UI thread kept running its timers while the index was rebuilt"
    assert worst < 250, f"the UI thread was blocked {worst:.0f} ms while the index was rebuilt"

    # The same question in a new conversation: the first answer is in the learned index and gets drafted.
    w.new_conversation()
    second = ask(qtbot, w, "Tell me something")
    assert second.token_ids == first.token_ids
    assert second.stats.accepted_by_source.get("learned", 0) > 20, second.stats.accepted_by_source


def test_learning_off_records_nothing_and_forget_clears(qtbot, model, tokenizer, tmp_path):
    store = LearnedStore("tiny", len(tokenizer), tmp_path / "learned")
    off = Settings(max_new_tokens=16, drafters={"retrieval": False, "learned": False, "context": True, "model": False})
    w = window_for(qtbot, model, tokenizer, tmp_path, off, store)
    ask(qtbot, w, "Hello")
    qtbot.wait(300)
    assert store.stats().answers == 0
    assert w.findChild(QLabel, "statusLearned").text() == "learned: none yet (off)"

    w.runtime.apply(dataclasses.replace(off, drafters=dict(off.drafters, learned=True)))
    w.drafters_changed()
    ask(qtbot, w, "Hello again")
    qtbot.waitUntil(lambda: store.stats().indexed_answers == 1, timeout=10_000)
    # the first index makes the learned drafter usable, and the status bar names it
    qtbot.waitUntil(lambda: "learned" in w.findChild(QLabel, "statusDrafters").text(), timeout=5_000)
    qtbot.waitUntil(lambda: w.forget_action.isEnabled(), timeout=5_000)
    w.forget_learned(confirm=False)
    qtbot.waitUntil(lambda: w.findChild(QLabel, "statusLearned").text() == "learned: none yet", timeout=10_000)
    assert not (tmp_path / "learned" / "tiny.tokens").exists()
