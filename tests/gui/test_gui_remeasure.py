"""After an answer, the window measures plain decoding again, behind it (offscreen Qt, a tiny real
model): where the plain rate at the conversation's context is unknown (a long message, every step
drafted), or the last measurement is old; not after an answer at a context it knows."""

import os
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.gui.main_window import BASELINE_MAX_AGE_S, MainWindow
from draftscope.storage import HistoryStore


def answered(engine, length: int):
    """An answer of one token to a ``length``-token prompt: no plain step of its own teaches the curve
    (as an answer that drafted at every step), and the slot's cache holds the conversation."""
    prompt = [5 + (i * 37) % 250 for i in range(length)]
    *_, final = engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=1))
    return final


def test_plain_speed_is_measured_again_where_the_conversations_context_is_unknown(qtbot, tokenizer, tmp_path):
    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64)
    model.config.max_position_embeddings = 4096
    engine = Engine(model, tokenizer, name="tiny")
    engine.plain_rate.observe(150, 0.004)  # as the load measured it: a short prompt and a longer context
    engine.plain_rate.observe(1100, 0.006)
    engine.baseline_tokens_per_second, engine.baseline_measured_at = 250.0, time.monotonic()
    window = MainWindow(runtime_for(engine), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    asked = []
    measure = window.measure_baseline
    window.measure_baseline = lambda: (asked.append(time.monotonic()), measure())

    def ended(final) -> None:
        before, count = engine.baseline_measured_at, len(asked)
        window._on_answer_ended(final)
        if len(asked) > count:  # the worker measures behind the window: wait for it to finish
            qtbot.waitUntil(lambda: engine.baseline_measured_at != before, timeout=60_000)

    short = answered(engine, 120)
    assert engine.plain_rate.knows(121)
    ended(short)
    assert asked == [], "a context the load measured: nothing to measure again"

    long = answered(engine, 2600)
    assert not engine.plain_rate.knows(2601), "no plain step at 2,600 tokens yet"
    ended(long)
    assert len(asked) == 1, "never measured at this conversation's length: measured again"
    assert engine.plain_rate.knows(2601), "on the conversation the cache holds"
    ended(long)
    assert len(asked) == 1, "known now: not measured again"

    engine.baseline_measured_at -= BASELINE_MAX_AGE_S + 1
    ended(answered(engine, 120))
    assert len(asked) == 2, "the last measurement is old: measured again"
    assert time.monotonic() - engine.baseline_measured_at < BASELINE_MAX_AGE_S

    engine.baseline_measured_at = None  # the launcher's measurement has not run yet: it is its to make
    ended(long)
    assert len(asked) == 2
