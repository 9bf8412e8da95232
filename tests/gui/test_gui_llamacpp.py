"""The window on the llama.cpp backend (offscreen Qt, the tiny GGUF): the status bar names the
backend, an answer streams with its drafts shown as on torch, Stop ends it, and the recurrent
drafter trains and drafts on it."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp

need_llama_cpp()

from engine_fixtures import pin_budget, tiny_llama
from gguf_fixtures import write_tiny_gguf
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QPushButton
from runtime_helpers import runtime_for

from draftscope.drafters import ContextDrafter
from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore

PROMPT = "def main(): print('hello world') def main(): print('hello world')"


@pytest.fixture(scope="module")
def engine(tokenizer, tokenizer_dir, tmp_path_factory):
    path = write_tiny_gguf(
        tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=5), tokenizer_dir
    )
    backend = LlamaCppBackend(path, tokenizer, name="tiny (GGUF)", context=512, threads=1)
    engine = pin_budget(Engine(backend=backend), nodes=8)
    engine.eos_ids = set()  # a full-length answer: the random model would otherwise stop at its EOS
    yield engine
    backend.close()


def make_window(qtbot, engine, db, max_new_tokens=40):
    window = MainWindow(runtime_for(engine, max_new_tokens=max_new_tokens), HistoryStore(db))
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
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000) as done:
        send(qtbot, w, PROMPT)
    final = done.args[0]
    qtbot.waitUntil(lambda: w.findChild(QPushButton, "sendButton").isEnabled(), timeout=5000)
    assert final.finish_reason == "length" and final.stats.tokens == 40
    messages = w.history.messages(w.conversation_id)
    assert messages[-1].content == final.text and "τ" in w.chat_view.toPlainText()
    prompt = [{"role": "user", "content": PROMPT}]
    plain = list(engine.generate(GenerationRequest(messages=prompt, max_new_tokens=40)))[-1]
    assert sum(final.stats.accepted_by_source.values()) > 0
    # the drafts changed nothing, but where batch shape moved a measured near-tie of llama.cpp's logits
    assert_plain_or_near_tie(
        engine, plain_prompt_ids(engine, prompt), plain.token_ids, final.token_ids, SamplingParams()
    )


def test_the_status_bar_names_the_layers_on_the_card_and_their_memory(qtbot, engine, monkeypatch):
    from PySide6.QtWidgets import QMainWindow

    from draftscope.engine.backends.llama.gpu_offload import Card, Offload
    from draftscope.gui.status_bar import StatusLine

    card = Card("CUDA0", "NVIDIA GeForce RTX 4070", 11_000_000_000, 12_000_000_000)
    offload = Offload(card, layers=29, of=28, bytes_used=1_200_000_000, why="all fit in the card's free 11.0 GB")
    monkeypatch.setattr(engine.backend, "offload", offload)
    window = QMainWindow()
    qtbot.addWidget(window)
    StatusLine(window.statusBar(), engine)
    window.resize(1200, 600)
    window.show()
    device = window.findChild(QLabel, "statusDevice")
    assert device.text() == "llama.cpp · F32 · CUDA0 29/29 layers, 1.2 GB"
    qtbot.waitUntil(lambda: device.shown_text() == device.text(), timeout=2000)  # laid out, not elided
    tip = device.toolTip()
    assert "all of its layers on the NVIDIA GeForce RTX 4070 (1.2 GB of 12.0 GB; all fit" in tip
    assert "Settings ▸ Model ▸ Backend, Precision and GPU layers change it" in tip


def plain_prompt_ids(engine, messages) -> list[int]:
    """The prompt's token ids as the engine builds them from chat messages."""
    return engine.encode_chat(messages)


def recurrent_formats(document) -> list:
    """The character formats of the chat's tokens drafted by the recurrent drafter."""
    found, block = [], document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.toolTip().endswith("drafted by the recurrent drafter"):
                found.append(fmt)
            it += 1
        block = block.next()
    return found


def test_the_recurrent_drafter_trains_and_drafts_in_the_window_on_llama_cpp(qtbot, engine, tmp_path, monkeypatch):
    """File ▸ Train the recurrent drafter on a GGUF model: the dialog trains through llama.cpp (no
    torch copy), the window takes the head, Settings offers it, and the next answer's accepted beams
    are coloured as the recurrent drafter's in the chat."""
    import json

    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor
    from PySide6.QtWidgets import QCheckBox

    from draftscope.gui.dialogs.settings_dialog import SettingsDialog
    from draftscope.gui.dialogs.train_head import head_description
    from draftscope.gui.palettes import PROVENANCE_COLOURS

    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))  # the head goes to data/heads
    questions = [f"Question {i}: how do I print hello world?" for i in range(12)]
    chats = tmp_path / "own.jsonl"
    with chats.open("w") as f:  # the model's own answers: what the head learns to predict
        for q in questions:
            reply = list(
                engine.generate(GenerationRequest(messages=[{"role": "user", "content": q}], max_new_tokens=60))
            )[-1].text
            f.write(
                json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": reply}]})
                + "\n"
            )
    from runtime_helpers import CONTEXT_ONLY, GREEDY

    from draftscope.storage import Settings

    settings = Settings(**{**GREEDY, "max_new_tokens": 60}, drafters={**CONTEXT_ONLY, "recurrent": True})
    w = MainWindow(runtime_for(engine, settings), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(w)
    w.show()
    w.set_show_provenance(True)
    w.open_train_dialog(
        options_overrides={
            "tokens": 80 * 64,
            "seq_len": 32,
            "batch": 2,
            "length": 3,
            "val_sequences": 2,
            "checkpoint_every": 1000,
            "draft_vocab": 128,
        }
    )
    dialog = w.train_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.data_combo.setCurrentIndex(dialog.data_combo.findData("chat"))
    dialog.path_edit.setText(str(chats))
    with qtbot.waitSignal(dialog.head_trained, timeout=120_000):
        qtbot.mouseClick(dialog.findChild(QPushButton, "trainStart"), Qt.MouseButton.LeftButton)
    dialog.accept()
    assert w.runtime.recurrent is not None and "recurrent" in w.findChild(QLabel, "statusDrafters").text()
    offered = SettingsDialog(settings, devices=("cpu",), recurrent=head_description(settings.model))
    qtbot.addWidget(offered)
    assert offered.findChild(QCheckBox, "drafterRecurrent").isEnabled(), "Settings offers the head for the GGUF"

    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000) as done:
        send(qtbot, w, questions[3])
    final = done.args[0]
    accepted = final.stats.accepted_by_source.get("recurrent", 0)
    assert "recurrent" in final.stats.drafters and accepted > 0, final.stats.accepted_by_source
    coloured = recurrent_formats(w.chat_view.document())
    assert coloured and all(
        f.background().color() == QColor(PROVENANCE_COLOURS["light"]["recurrent"]) for f in coloured
    )


class SlowContext(ContextDrafter):
    """Context drafts, 30 ms a step: an answer long enough to stop halfway."""

    def propose(self, context_ids, budget):
        import time

        time.sleep(0.03)
        return super().propose(context_ids, budget)


def test_stop_ends_an_answer_on_llama_cpp(qtbot, engine, tmp_path):
    from PySide6.QtCore import Qt

    window = MainWindow(
        runtime_for(engine, max_new_tokens=400, drafters=lambda: [SlowContext()]), HistoryStore(tmp_path / "h.sqlite3")
    )
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.answer_signals.steps, timeout=30_000):
        send(qtbot, window, PROMPT)
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=10_000) as stopped:
        qtbot.mouseClick(window.findChild(QPushButton, "stopButton"), Qt.MouseButton.LeftButton)
    final = stopped.args[0]
    assert final.finish_reason == "cancel" and 0 < final.stats.tokens < 400
    qtbot.waitUntil(lambda: window.findChild(QPushButton, "sendButton").isEnabled(), timeout=5000)
    # the model is free again: the next answer runs to its length
    window.settings.max_new_tokens = 10
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000) as done:
        send(qtbot, window, "again")
    assert done.args[0].finish_reason == "length" and done.args[0].stats.tokens == 10


def test_the_race_runs_on_llama_cpp(qtbot, engine, tmp_path):
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QTextBrowser

    w = make_window(qtbot, engine, tmp_path / "h.sqlite3", max_new_tokens=40)
    w.chat_input.setPlainText(PROMPT)
    w.race_action.trigger()
    race = w.race_dialog
    finals = []
    race.answer_signals.answer_ended.connect(
        lambda final, *_: finals.append(final)
    )  # the plain lane's answer, then the speculative one's
    with qtbot.waitSignal(race.finished_race, timeout=120_000):
        qtbot.mouseClick(race.findChild(QPushButton, "raceButton"), Qt.MouseButton.LeftButton)
    plain, spec = race.lanes["plain"], race.lanes["speculative"]
    assert plain.tokens == spec.tokens == 40
    qtbot.waitUntil(lambda: not race.timer.isActive(), timeout=max(10_000, int(plain.elapsed_s * 1000) + 5000))
    assert race.findChild(QTextBrowser, "raceSpeculativeView").toPlainText() == spec.moments[-1][1]
    # greedy: both sides write the same answer, up to a measured near-tie of llama.cpp's logits
    assert [f.text for f in finals] == [plain.moments[-1][1], spec.moments[-1][1]]
    ids = plain_prompt_ids(engine, [{"role": "user", "content": PROMPT}])
    assert_plain_or_near_tie(engine, ids, finals[0].token_ids, finals[1].token_ids, SamplingParams())
    race.close()
