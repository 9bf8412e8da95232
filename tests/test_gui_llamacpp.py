"""The window on the llama.cpp backend (offscreen Qt, the tiny GGUF): the status bar names the
backend, an answer streams with its drafts shown as on torch, Stop ends it, and training the
recurrent drafter says it needs torch instead of failing."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")
pytest.importorskip("llama_cpp")

from PySide6.QtWidgets import QLabel, QMessageBox, QPlainTextEdit, QPushButton  # noqa: E402

from draftscope.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402
from draftscope.engine.drafters import ContextDrafter  # noqa: E402
from draftscope.engine.engine import Engine, GenerationRequest  # noqa: E402
from draftscope.gui.main_window import MainWindow  # noqa: E402
from draftscope.storage import HistoryStore, Settings  # noqa: E402
from engine_fixtures import pin_budget, tiny_llama  # noqa: E402
from gguf_fixtures import write_tiny_gguf  # noqa: E402


PROMPT = "def main(): print('hello world') def main(): print('hello world')"


@pytest.fixture(scope="module")
def engine(tokenizer, tokenizer_dir, tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=5),
                           tokenizer_dir)
    backend = LlamaCppBackend(path, tokenizer, name="tiny (GGUF)", context=512, threads=1)
    engine = pin_budget(Engine(backend=backend), nodes=8)
    engine.eos_ids = set()  # a full-length answer: the random model would otherwise stop at its EOS
    yield engine
    backend.close()


def make_window(qtbot, engine, db, max_new_tokens=40):
    window = MainWindow(engine, HistoryStore(db), Settings(max_new_tokens=max_new_tokens),
                        drafters=lambda: [ContextDrafter()])
    qtbot.addWidget(window)
    window.show()
    return window


def send(qtbot, window, text):
    from PySide6.QtCore import Qt

    window.findChild(QPlainTextEdit, "chatInput").setPlainText(text)
    qtbot.mouseClick(window.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)


def test_the_window_answers_on_llama_cpp_and_says_so(qtbot, engine, tmp_path):
    w = make_window(qtbot, engine, tmp_path / "h.sqlite3")
    status = w.findChild(QLabel, "statusDevice").text()
    assert "llama.cpp" in status and "F32" in status
    with qtbot.waitSignal(w.worker.finished, timeout=60_000) as done:
        send(qtbot, w, PROMPT)
    final = done.args[0]
    qtbot.waitUntil(lambda: w.findChild(QPushButton, "sendButton").isEnabled(), timeout=5000)
    assert final.finish_reason == "length" and final.stats.tokens == 40
    messages = w.history.messages(w.conversation_id)
    assert messages[-1].content == final.text and "τ" in w.chat_view.toPlainText()
    prompt = [{"role": "user", "content": PROMPT}]
    plain = list(engine.generate(GenerationRequest(messages=prompt, max_new_tokens=40)))[-1]
    assert plain.token_ids == final.token_ids  # the drafts changed nothing (fp32 weights, no near-tie here)
    assert sum(final.stats.accepted_by_source.values()) > 0


def test_training_the_recurrent_drafter_explains_it_needs_torch(qtbot, engine, tmp_path, monkeypatch):
    w = make_window(qtbot, engine, tmp_path / "h.sqlite3")
    said = []
    monkeypatch.setattr(QMessageBox, "information", lambda parent, title, text: said.append(text))
    w.train_action.trigger()
    assert said and "torch" in said[0] and getattr(w, "train_dialog", None) is None
