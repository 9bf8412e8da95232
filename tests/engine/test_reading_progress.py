"""A long message is read in parts, and the reader hears how far: ReadingEvents N of M ending at M
(only for a request that asks: the window), the same answer as reading it whole (fp32 torch: token
for token), and the window shows "reading your message · N of M tokens" over a progress bar."""

import os
import threading

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from engine_fixtures import IdTokenizer, tiny_llama

from draftscope.engine.answer import READ_CHUNK
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import FinalEvent, ReadingEvent, StepEvent

V = 300


@pytest.fixture(scope="module")
def torch_engine():
    return Engine(tiny_llama(V, seed=7, max_positions=2048), IdTokenizer())


def answer(engine, prompt, *, progress, keep_cache=False):
    events = list(
        engine.generate(
            GenerationRequest(prompt_ids=prompt, max_new_tokens=24, reading_progress=progress, keep_cache=keep_cache)
        )
    )
    reading = [(e.read, e.total) for e in events if isinstance(e, ReadingEvent)]
    assert isinstance(events[-1], FinalEvent) and events[-1].finish_reason in ("length", "eos"), events[-1]
    first_step = next(i for i, e in enumerate(events) if isinstance(e, StepEvent))
    assert all(isinstance(e, ReadingEvent) for e in events[:first_step]), "reading comes before the first token"
    return events[-1], reading


def test_a_long_prompt_is_read_in_parts_with_progress_and_the_same_greedy_answer_on_fp32_torch(torch_engine):
    prompt = np.random.default_rng(1).integers(0, V, 1000).tolist()
    whole, none = answer(torch_engine, prompt, progress=False)
    assert none == [], "a request that does not ask hears no reading events (the server, the terminal)"
    parts, reading = answer(torch_engine, prompt, progress=True)
    assert reading == [(0, 999), (256, 999), (512, 999), (768, 999), (999, 999)], reading
    assert parts.token_ids == whole.token_ids, "reading in parts changed the answer"
    assert parts.stats.prompt_tokens == 1000 and parts.stats.prompt_kept == 0

    # a follow-up keeps what the cache holds: only the new part is read, and counted
    longer = prompt + parts.token_ids + np.random.default_rng(2).integers(0, V, 300).tolist()
    again, reading = answer(torch_engine, longer, progress=True, keep_cache=True)
    kept = again.stats.prompt_kept
    assert kept >= 1000 and reading[0] == (0, len(longer) - 1 - kept) and reading[-1][0] == reading[-1][1], reading
    plain, _ = answer(torch_engine, longer, progress=False)
    assert again.token_ids == plain.token_ids


def test_llama_cpp_reads_a_long_prompt_with_progress(tokenizer, tokenizer_dir, tmp_path):
    from llama_helpers import need_llama_cpp

    need_llama_cpp()
    from gguf_fixtures import write_tiny_gguf

    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

    path = write_tiny_gguf(
        tmp_path / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=5, max_positions=2048), tokenizer_dir
    )
    backend = LlamaCppBackend(path, tokenizer, name="tiny (GGUF)", context=2048, threads=1)
    try:
        engine = Engine(backend=backend)
        prompt = np.random.default_rng(3).integers(0, len(tokenizer), 900).tolist()
        final, reading = answer(engine, prompt, progress=True)
        assert reading[0] == (0, 899) and reading[-1] == (899, 899), reading
        assert [r for r, _ in reading] == sorted(r for r, _ in reading) and len(reading) == 1 + -(-899 // READ_CHUNK)
        assert final.token_ids  # not compared with reading it whole: llama.cpp's sums depend on the batch
    finally:
        backend.close()


def test_the_window_says_it_is_reading_a_long_message(qtbot, tokenizer, tmp_path):
    pytest.importorskip("PySide6")
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QLabel, QPlainTextEdit, QProgressBar, QPushButton
    from runtime_helpers import runtime_for

    from draftscope.gui.main_window import MainWindow
    from draftscope.storage import HistoryStore

    engine = Engine(tiny_llama(len(tokenizer), seed=4, max_positions=4096), tokenizer)
    window = MainWindow(
        runtime_for(engine, drafters=lambda: [], max_new_tokens=8), HistoryStore(tmp_path / "h.sqlite3")
    )
    qtbot.addWidget(window)
    window.show()
    # the answer's thread waits at the second part (as a slow CPU would): the window meanwhile says so
    paused, go_on, heard = threading.Event(), threading.Event(), []

    def hold(event):
        heard.append(event)
        if event.read == READ_CHUNK:
            paused.set()
            go_on.wait(30)

    window.session.events.reading.connect(hold)
    text = " ".join(f"word{i % 50}" for i in range(700))
    window.findChild(QPlainTextEdit, "chatInput").setPlainText(text)
    qtbot.mouseClick(window.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    indicator, label = window.reading, window.findChild(QLabel, "readingLabel")
    bar = window.findChild(QProgressBar, "readingProgress")
    try:
        qtbot.waitUntil(paused.is_set, timeout=30_000)
        qtbot.waitUntil(indicator.isVisible, timeout=5_000)
        total = heard[-1].total
        assert total > 2 * READ_CHUNK
        qtbot.waitUntil(
            lambda: label.text() == f"reading your message · {READ_CHUNK} of {total:,} tokens", timeout=5_000
        )
        assert (bar.value(), bar.maximum()) == (READ_CHUNK, total)
        window.grab().save(str(tmp_path / "reading.png"))
        if os.environ.get("DRAFTSCOPE_SHOT"):
            window.grab().save(os.environ["DRAFTSCOPE_SHOT"])
    finally:
        go_on.set()
    qtbot.waitUntil(lambda: not window.streaming, timeout=60_000)
    assert not indicator.isVisible(), "the answer shows once its first token came"
    assert heard[-1].read == heard[-1].total
    window.session.events.reading.disconnect(hold)
