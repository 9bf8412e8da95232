"""The context length (Settings ▸ Model) and the system prompt's presets (Settings ▸ Generation),
on the tiny GGUF opened as the app opens it (the launcher's load_runtime, offscreen Qt): a context
set in the dialog reloads the model with it and a message past it is refused in words; a preset
chosen fills the prompt and the next answer is asked with it; a preset saved is in the settings
file and offered again after a restart; old and damaged settings files still load."""

import json
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")
from llama_helpers import need_llama_cpp

need_llama_cpp()

from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit, QMessageBox, QPlainTextEdit, QPushButton, QSpinBox
from runtime_helpers import CONTEXT_ONLY

from draftscope.core.runtime import load_runtime
from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.gui.launcher import Launcher
from draftscope.storage import HistoryStore, Settings, load_settings
from draftscope.storage.presets import BUILTIN_PRESETS

TRAINED = 2048  # the tiny model's own context: the default opens all of it (under llama.cpp's 4,096)


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    model = tiny_llama(len(tokenizer), seed=5, max_positions=TRAINED)
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", model, tokenizer_dir)


pytestmark = pytest.mark.usefixtures("own_data_and_cache")  # learned answers, the default datastore


def start(qtbot, gguf, tmp_path, **fields):
    settings = Settings(
        model=str(gguf), backend="llama.cpp", drafters=dict(CONTEXT_ONLY), max_new_tokens=8, threads=1, **fields
    )
    launcher = Launcher(
        load_runtime, HistoryStore(tmp_path / "h.sqlite3"), settings, settings_file=tmp_path / "settings.json"
    )
    with qtbot.waitSignal(launcher.window_ready, timeout=120_000) as ready:
        launcher.start()
    window = ready.args[0]
    qtbot.addWidget(window)
    return launcher, window


def open_settings(qtbot, launcher):
    launcher.window.settings_action.trigger()
    dialog = launcher.settings_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=5000)
    return dialog


def ok(qtbot, dialog):
    qtbot.mouseClick(dialog.findChild(QPushButton, "okButton"), Qt.MouseButton.LeftButton)


def send(qtbot, window, text):
    window.findChild(QPlainTextEdit, "chatInput").setPlainText(text)
    qtbot.mouseClick(window.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)


def test_a_context_length_set_in_the_dialog_reloads_the_model_with_it(qtbot, gguf, tmp_path):
    launcher, window = start(qtbot, gguf, tmp_path)
    try:
        assert window.runtime.engine.max_context == TRAINED, "0: the model's default"
        dialog = open_settings(qtbot, launcher)
        spin = dialog.findChild(QSpinBox, "contextLengthSpin")
        assert spin.value() == 0 and spin.text() == "model default"
        spin.setValue(100)  # below the least a context may be: refused on OK, by name
        ok(qtbot, dialog)
        error = dialog.findChild(QLabel, "settingsError")
        assert dialog.isVisible() and "context_length must be 0" in error.text() and "256" in error.text()
        spin.setValue(512)
        with qtbot.waitSignal(launcher.window_ready, timeout=120_000) as reloaded:
            ok(qtbot, dialog)
        window = reloaded.args[0]
        qtbot.addWidget(window)
        assert window.runtime.engine.max_context == 512 and window.runtime.engine.backend.max_context == 512
        assert load_settings(tmp_path / "settings.json")[0].context_length == 512, "saved once the model opened"

        with qtbot.waitSignal(window.answer_signals.answer_failed, timeout=60_000) as failed:
            send(qtbot, window, " ".join(f"word{k}" for k in range(600)))
        assert "reads at most 512" in failed.args[0], failed.args[0]
        qtbot.waitUntil(
            lambda: (b := window.findChild(QMessageBox, "answerErrorDialog")) is not None and b.isVisible(),
            timeout=5000,
        )  # the window shows what the failure said
        box = window.findChild(QMessageBox, "answerErrorDialog")
        assert "reads at most 512" in box.text()
        box.accept()

        # the refused message is back in the box, out of the conversation: nothing typed is lost,
        # and the next message in the same conversation is answered
        long_text = " ".join(f"word{k}" for k in range(600))
        assert window.findChild(QPlainTextEdit, "chatInput").toPlainText() == long_text
        assert [t.role for t in window.session.turns()] == []
        with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):  # a short one fits
            send(qtbot, window, "Hello there")
        assert [t.content for t in window.session.turns() if t.role == "user"] == ["Hello there"]
    finally:
        launcher.window.close()
        launcher.server.stop()


def test_a_context_past_the_models_own_is_clamped_and_said(gguf):
    runtime = load_runtime(
        Settings(model=str(gguf), backend="llama.cpp", drafters=dict(CONTEXT_ONLY), context_length=8192, threads=1)
    )
    try:
        assert runtime.engine.max_context == TRAINED
        assert any("reads at most 2,048 tokens here, not the 8,192 set" in n for n in runtime.notices), runtime.notices
    finally:
        runtime.close()


@pytest.mark.parametrize("slots", [1, 3])
def test_the_torch_backend_takes_a_context_length(tokenizer, slots):
    from draftscope.engine.backends import torch_backend_for

    model = tiny_llama(len(tokenizer), seed=5, max_positions=TRAINED)
    assert torch_backend_for(model, tokenizer, slots=slots).max_context == TRAINED
    assert torch_backend_for(model, tokenizer, slots=slots, context=512).max_context == 512
    assert torch_backend_for(model, tokenizer, slots=slots, context=8192).max_context == TRAINED


def test_the_command_line_takes_a_context_length(gguf, capsys):
    from draftscope.cli import build_parser
    from draftscope.commands.model_options import runtime_from_args

    args = build_parser().parse_args(
        [
            "generate",
            "hi",
            "--model",
            str(gguf),
            "--backend",
            "llama.cpp",
            "--drafters",
            "none",
            "--threads",
            "1",
            "--context",
            "512",
        ]
    )
    runtime = runtime_from_args(args)
    try:
        assert runtime.engine.max_context == 512
    finally:
        runtime.close()


def test_a_preset_fills_the_prompt_and_the_next_answer_is_asked_with_it(qtbot, gguf, tmp_path):
    launcher, window = start(qtbot, gguf, tmp_path)
    try:
        dialog = open_settings(qtbot, launcher)
        combo = dialog.findChild(QComboBox, "presetCombo")
        prompt = dialog.findChild(QPlainTextEdit, "systemPromptEdit")
        assert combo.currentText() == "None" and prompt.toPlainText() == ""
        assert [combo.itemText(i) for i in range(len(BUILTIN_PRESETS))] == list(BUILTIN_PRESETS)
        combo.setCurrentIndex(combo.findText("Code assistant"))
        assert prompt.toPlainText() == BUILTIN_PRESETS["Code assistant"]
        assert not dialog.findChild(QPushButton, "deletePresetButton").isEnabled(), "built-in ones stay"
        ok(qtbot, dialog)
        assert not dialog.isVisible() and window is launcher.window, "no reload for a system prompt"

        requests = []
        window.request_generation.connect(requests.append)
        with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):
            send(qtbot, window, "Write a loop")
        assert requests[0].messages[0] == {"role": "system", "content": BUILTIN_PRESETS["Code assistant"]}
        assert requests[0].messages[-1]["content"] == "Write a loop"
    finally:
        launcher.window.close()
        launcher.server.stop()


def test_a_saved_preset_is_kept_and_offered_after_a_restart(qtbot, gguf, tmp_path):
    launcher, window = start(qtbot, gguf, tmp_path)
    try:
        dialog = open_settings(qtbot, launcher)
        combo = dialog.findChild(QComboBox, "presetCombo")
        prompt = dialog.findChild(QPlainTextEdit, "systemPromptEdit")
        name = dialog.findChild(QLineEdit, "presetNameEdit")
        status = dialog.findChild(QLabel, "presetStatus")
        prompt.setPlainText("Answer like a pirate.")
        assert combo.currentText() == "Custom text"
        name.setText("Summariser")  # a built-in's name: refused, in words
        qtbot.mouseClick(dialog.findChild(QPushButton, "savePresetButton"), Qt.MouseButton.LeftButton)
        assert "built-in preset" in status.text() and combo.findText("Summariser") == combo.findData("Summariser")
        name.setText("  Pirate ")
        qtbot.mouseClick(dialog.findChild(QPushButton, "savePresetButton"), Qt.MouseButton.LeftButton)
        assert combo.currentText() == "Pirate" and "Saved as 'Pirate'" in status.text()
        assert dialog.findChild(QPushButton, "deletePresetButton").isEnabled()
        ok(qtbot, dialog)
    finally:
        launcher.window.close()
        launcher.server.stop()

    saved, notices = load_settings(tmp_path / "settings.json")  # the app starting again
    assert notices == [] and saved.prompt_presets == {"Pirate": "Answer like a pirate."}
    again = SettingsDialog(saved, devices=["cpu"])
    qtbot.addWidget(again)
    combo = again.findChild(QComboBox, "presetCombo")
    prompt = again.findChild(QPlainTextEdit, "systemPromptEdit")
    assert combo.currentText() == "Pirate", "the prompt in use is named as its preset"
    combo.setCurrentIndex(combo.findText("None"))
    assert prompt.toPlainText() == ""
    combo.setCurrentIndex(combo.findText("Pirate"))
    assert prompt.toPlainText() == "Answer like a pirate."
    qtbot.mouseClick(again.findChild(QPushButton, "deletePresetButton"), Qt.MouseButton.LeftButton)
    assert combo.findText("Pirate") < 0 and combo.currentText() == "Custom text"
    assert again.result_settings().prompt_presets == {} and prompt.toPlainText() == "Answer like a pirate."


def test_a_settings_file_without_the_new_fields_loads(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "model": "org/m", "system_prompt": "Be brief.", "threads": 2}))
    settings, notices = load_settings(path)
    assert notices == [] and (settings.model, settings.system_prompt, settings.threads) == ("org/m", "Be brief.", 2)
    assert settings.context_length == 0 and settings.prompt_presets == {}


def test_bad_values_fall_back_with_a_notice_and_the_good_presets_are_kept(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "context_length": 100,
                "temperature": 0.5,
                "prompt_presets": {"Mine": "Be kind.", "Code assistant": "not mine", "Broken": 7, "": "no name"},
            }
        )
    )
    settings, notices = load_settings(path)
    assert settings.context_length == 0 and settings.temperature == 0.5
    assert settings.prompt_presets == {"Mine": "Be kind."}
    said = "\n".join(notices)
    assert "'context_length' was out of range" in said and "between 256 and 1,048,576" in said
    assert "'Code assistant' was left out ('Code assistant' is a built-in preset" in said
    assert "'Broken' was left out" in said and "a preset needs a name" in said
    path.write_text(json.dumps({"version": 1, "context_length": "long", "prompt_presets": ["a"]}))
    settings, notices = load_settings(path)
    assert (settings.context_length, settings.prompt_presets) == (0, {})
    assert len(notices) == 2 and all("invalid value" in n for n in notices)
