"""Training the recurrent drafter in the app (offscreen Qt, a tiny random Llama): the dialog trains
to completion off the UI thread, writes the head and the next answer drafts with it; Cancel keeps a
checkpoint and Start resumes; closing while training cancels and waits; bad data is shown in the
dialog; the settings' recurrent switch is usable only once a head exists."""

import json
import time

import pytest

pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QCheckBox, QLabel, QPlainTextEdit, QPushButton
from runtime_helpers import GREEDY

from draftscope.core.runtime import Runtime
from draftscope.drafters.recurrent.files import default_head_path
from draftscope.drafters.recurrent.train import checkpoint_path, train_head
from draftscope.engine.engine import Engine
from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.gui.dialogs.train_head import TrainHeadDialog, head_description
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore, Settings

MODEL = "tiny"
TINY = {"seq_len": 16, "batch": 2, "length": 3, "val_sequences": 4, "val_every": 5, "checkpoint_every": 1000}
SETTINGS = Settings(  # greedy: what the trained head drafts is the model's own choice
    **{**GREEDY, "max_new_tokens": 24},
    model=MODEL,
    drafters={"retrieval": False, "learned": False, "context": True, "model": False},
)


pytestmark = pytest.mark.usefixtures("own_data_and_cache", "one_thread")  # heads go to data/heads


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64)


@pytest.fixture
def engine(model, tokenizer):
    engine = Engine(model, tokenizer, name=MODEL)
    engine.eos_ids = set()
    return engine


@pytest.fixture
def chat_file(tmp_path):
    path = tmp_path / "chats.jsonl"
    lines = []
    for i in range(30):
        lines.append(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"Question {i}: how do I print hello world in Python?"},
                        {
                            "role": "assistant",
                            "content": "def main():\n    print('hello world')\n    return 0\n"
                            "The quick brown fox jumps over the lazy dog.",
                        },
                    ]
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def open_dialog(qtbot, engine, chat_file, tokens=320, **kw):
    dialog = TrainHeadDialog(engine, MODEL, options_overrides={"tokens": tokens, **TINY}, **kw)
    qtbot.addWidget(dialog)
    dialog.show()
    choose_file(dialog, chat_file)
    return dialog


def choose_file(dialog, path, kind="chat"):
    dialog.data_combo.setCurrentIndex(dialog.data_combo.findData(kind))
    dialog.path_edit.setText(str(path))


def click(qtbot, dialog, name):
    button = dialog.findChild(QPushButton, name)
    assert button is not None and button.isEnabled(), name
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def text(dialog, name):
    return dialog.findChild(QLabel, name).text()


def held(calls, at=3):
    """train_head whose first run holds after step ``at`` until it is cancelled (at most 30 s), so a
    test can press Cancel mid-run however fast the steps are; records each run's resume flag."""

    def trainer(*args, progress, resume, cancel, **kw):
        calls.append(resume)

        def hold(p):
            progress(p)
            deadline = time.monotonic() + 30
            while (
                len(calls) == 1
                and p.phase == "training"
                and p.step == at
                and not cancel.cancelled
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)

        return train_head(*args, progress=hold, resume=resume, cancel=cancel, **kw)

    return trainer


def test_trains_writes_the_head_and_the_next_answer_drafts_with_it(qtbot, engine, tokenizer, chat_file, tmp_path):
    w = MainWindow(Runtime(SETTINGS, engine), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(w)
    w.show()
    assert "recurrent" not in w.findChild(QLabel, "statusDrafters").text()
    assert w.findChild(QAction, "trainHeadAction") is w.train_action

    w.open_train_dialog(options_overrides=TINY)
    dialog = w.train_dialog
    assert dialog.isVisible() and dialog.windowTitle() == "Train the recurrent drafter"
    assert dialog.tokens_spin.value() == 200_000 and text(dialog, "trainEstimate") == ""  # no rate measured yet
    assert "no recurrent head" in text(dialog, "trainExisting")
    choose_file(dialog, chat_file)
    dialog.tokens_spin.setValue(1_000)
    with qtbot.waitSignal(dialog.head_trained, timeout=60_000) as trained:
        click(qtbot, dialog, "trainStart")
        assert dialog.is_training() and not dialog.findChild(QPushButton, "trainStart").isEnabled()
    path = default_head_path(MODEL)
    assert trained.args == [str(path)]
    assert path.exists() and path.with_suffix(".json").exists() and not checkpoint_path(path).exists()

    summary = text(dialog, "trainSummary")
    report = dialog.report()
    assert report.steps == 32 and dialog.findChild(QLabel, "trainSummary").isVisible()
    assert f"Trained on {report.tokens:,} tokens" in summary and "tokens/s" in summary
    assert "Validation: τ" in summary and "top-1 by depth" in summary
    assert dialog.progress.value() == dialog.progress.maximum() == 32
    assert "tokens/s" in text(dialog, "trainEstimate")  # measured now
    assert "This model has a head (trained on" in text(dialog, "trainExisting")

    # the window took the head: the drafters it makes include the recurrent one, and the next answer uses it
    assert w.runtime.recurrent is not None
    assert "recurrent" in [d.name for d in w.make_drafters()]
    assert "recurrent" in w.findChild(QLabel, "statusDrafters").text()
    dialog.accept()
    w.findChild(QPlainTextEdit, "chatInput").setPlainText("How do I print hello world?")
    with qtbot.waitSignal(w.answer_signals.answer_ended, timeout=60_000) as done:
        qtbot.mouseClick(w.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    assert "recurrent" in done.args[0].stats.drafters


def test_cancel_keeps_a_checkpoint_and_start_resumes(qtbot, engine, chat_file):
    calls = []
    dialog = open_dialog(qtbot, engine, chat_file, tokens=640, trainer=held(calls))  # 20 steps
    click(qtbot, dialog, "trainStart")
    qtbot.waitUntil(lambda: dialog.progress.value() == 3, timeout=30_000)
    click(qtbot, dialog, "trainCancel")
    qtbot.waitUntil(lambda: not dialog.is_training(), timeout=30_000)
    assert checkpoint_path(dialog.out).exists() and not dialog.out.exists()
    assert "cancelled" in text(dialog, "trainStatus") and "continues from it" in text(dialog, "trainStatus")
    assert dialog.start_button.text() == "Resume" and dialog.choices.isEnabled()

    with qtbot.waitSignal(dialog.head_trained, timeout=60_000):
        click(qtbot, dialog, "trainStart")
    assert calls == [False, True]
    assert dialog.report().steps == 20 and dialog.out.exists() and not checkpoint_path(dialog.out).exists()
    assert dialog.start_button.text() == "Train again"


def test_closing_while_training_cancels_and_waits(qtbot, engine, chat_file):
    dialog = open_dialog(qtbot, engine, chat_file, tokens=640, trainer=held([]))
    click(qtbot, dialog, "trainStart")
    qtbot.waitUntil(lambda: dialog.progress.value() == 3, timeout=30_000)
    dialog.reject()  # the window's close button
    assert dialog.isVisible() and "closes once the checkpoint is saved" in text(dialog, "trainStatus")
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=30_000)
    assert not dialog.job.running  # the job and its thread ended
    assert checkpoint_path(dialog.out).exists()


def test_bad_data_is_shown_in_the_dialog(qtbot, engine, chat_file, tmp_path):
    dialog = open_dialog(qtbot, engine, tmp_path / "missing.jsonl")
    click(qtbot, dialog, "trainStart")
    qtbot.waitUntil(lambda: not dialog.is_training(), timeout=30_000)
    error = dialog.findChild(QLabel, "trainError")
    assert error.isVisible() and "could not be trained" in error.text() and "missing.jsonl" in error.text()
    assert not default_head_path(MODEL).exists()

    choose_file(dialog, tmp_path / "missing.answers.jsonl", kind="answers")
    click(qtbot, dialog, "trainStart")
    qtbot.waitUntil(lambda: not dialog.is_training(), timeout=30_000)
    assert "no such file" in error.text()

    dialog.path_edit.clear()
    click(qtbot, dialog, "trainStart")
    assert not dialog.is_training() and "Choose the file" in error.text()

    def broken(*args, **kw):
        raise RuntimeError("out of memory on the device")

    dialog._trainer = broken
    choose_file(dialog, chat_file)
    click(qtbot, dialog, "trainStart")
    qtbot.waitUntil(lambda: not dialog.is_training(), timeout=30_000)
    assert "Out of memory on the device." in error.text()

    # nothing was left broken: the same dialog trains once the data is good
    dialog._trainer = train_head
    with qtbot.waitSignal(dialog.head_trained, timeout=60_000):
        click(qtbot, dialog, "trainStart")
    assert not error.isVisible()


def test_the_settings_switch_needs_a_head(qtbot, engine, chat_file):
    assert head_description(MODEL) == ""
    settings = Settings(model=MODEL)
    d = SettingsDialog(settings, devices=("cpu",), recurrent=head_description(MODEL))
    qtbot.addWidget(d)
    box = d.findChild(QCheckBox, "drafterRecurrent")
    assert not box.isEnabled() and not box.isChecked()
    assert box.toolTip() == "Train one: File ▸ Train the recurrent drafter…"
    assert d.result_settings().drafters == settings.drafters  # the stored switch is kept

    dialog = open_dialog(qtbot, engine, chat_file)
    with qtbot.waitSignal(dialog.head_trained, timeout=60_000):
        click(qtbot, dialog, "trainStart")
    described = head_description(MODEL)
    assert described.startswith("trained on 320 tokens, validation τ ")
    d = SettingsDialog(settings, devices=("cpu",), recurrent=described)
    qtbot.addWidget(d)
    box = d.findChild(QCheckBox, "drafterRecurrent")
    assert box.isEnabled() and box.isChecked()
    assert described in d.findChild(QLabel, "recurrentHint").text()
    box.setChecked(False)
    assert d.result_settings().drafters["recurrent"] is False
