"""The settings dialog (offscreen Qt): a round trip through the widgets and the settings file,
Cancel, inline validation, opening on a corrupt file's defaults, and which changes need a reload.
The catalogue, draft models, precision and downloads: tests/gui/test_gui_catalog.py."""

import copy
import json
import os
from dataclasses import replace

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
)

from draftscope.core.settings_checks import OTHER
from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.storage import Settings, load_settings, save_settings
from draftscope.storage.settings import Change, Section, change_between, changed_fields

# The dialog looks up (and creates the folder of) the default datastore, and which catalogue
# models are downloaded: keep both in tmp.
pytestmark = pytest.mark.usefixtures("own_data_and_cache")


def choose(combo, data):
    index = combo.findData(data)
    assert index >= 0, data
    combo.setCurrentIndex(index)


def choose_other(combo):
    choose(combo, OTHER)


def open_dialog(qtbot, settings, devices=("cpu",)):
    dialog = SettingsDialog(settings, devices=devices)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def w(dialog, cls, name):
    widget = dialog.findChild(cls, name)
    assert widget is not None, name
    return widget


def click(qtbot, dialog, name):
    qtbot.mouseClick(w(dialog, QPushButton, name), Qt.MouseButton.LeftButton)


def error_text(dialog):
    return w(dialog, QLabel, "settingsError").text()


def model_folder(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


SAMPLE = Settings(
    model="HuggingFaceTB/SmolLM2-360M-Instruct",
    device="cuda",
    temperature=0.7,
    top_p=0.9,
    top_k=40,
    max_new_tokens=256,
    repetition_penalty=1.1,
    system_prompt="Be brief.",
    theme="dark",
    font_size=14,
    drafters={"retrieval": False, "learned": False, "context": True, "model": False, "recurrent": False},
)


def test_widgets_show_the_settings(qtbot):
    d = open_dialog(qtbot, SAMPLE)
    assert d.objectName() == "settingsDialog"
    assert w(d, QComboBox, "modelCombo").currentData() == OTHER  # not a catalogue model
    assert w(d, QLineEdit, "modelEdit").text() == SAMPLE.model and w(d, QLineEdit, "modelEdit").isVisible()
    assert w(d, QComboBox, "draftModelCombo").currentText() == "None"
    assert w(d, QComboBox, "dtypeCombo").currentData() == "auto"
    # A device stored on another machine stays selected, marked.
    assert w(d, QComboBox, "deviceCombo").currentText() == "cuda (not available)"
    assert [w(d, QComboBox, "deviceCombo").itemData(i) for i in range(3)] == ["auto", "cpu", "cuda"]
    assert w(d, QDoubleSpinBox, "temperatureSpin").value() == pytest.approx(0.7)
    assert w(d, QSpinBox, "topKSpin").value() == 40
    assert w(d, QComboBox, "themeCombo").currentText() == "Dark"
    assert not w(d, QCheckBox, "drafterRetrieval").isChecked()
    assert not w(d, QCheckBox, "drafterLearned").isChecked()
    assert w(d, QPlainTextEdit, "systemPromptEdit").toPlainText() == "Be brief."
    # Untouched, the form gives back exactly what it was given.
    assert d.result_settings() == SAMPLE


def test_round_trip_through_widgets_and_file(qtbot, tmp_path, build_index):
    original = copy.deepcopy(SAMPLE)
    index = build_index([[1, 2, 3, 4]]).path
    folder = model_folder(tmp_path)
    d = open_dialog(qtbot, SAMPLE)

    model = w(d, QLineEdit, "modelEdit")
    model.clear()
    qtbot.keyClicks(model, str(folder))
    device = w(d, QComboBox, "deviceCombo")
    device.setCurrentIndex(device.findData("cpu"))
    choose(w(d, QComboBox, "dtypeCombo"), "bfloat16")
    choose(w(d, QComboBox, "backendCombo"), "torch")
    w(d, QSpinBox, "seedSpin").setValue(42)
    choose_other(w(d, QComboBox, "draftModelCombo"))
    assert w(d, QLineEdit, "draftModelEdit").isVisible()
    qtbot.keyClicks(w(d, QLineEdit, "draftModelEdit"), "org/draft-model")
    qtbot.keyClicks(w(d, QLineEdit, "datastoreEdit"), str(index))
    w(d, QCheckBox, "drafterRetrieval").setChecked(True)
    assert w(d, QCheckBox, "drafterModel").isEnabled()
    w(d, QCheckBox, "drafterModel").setChecked(True)
    w(d, QDoubleSpinBox, "temperatureSpin").setValue(1.25)
    w(d, QSpinBox, "topKSpin").setValue(0)
    threads = w(d, QComboBox, "threadsCombo")
    assert threads.value() == 0 and threads.currentText().startswith("Automatic")  # the default
    threads.setCurrentIndex(threads.count() - 1)  # the list reads down: the last choice is one thread
    prompt = w(d, QPlainTextEdit, "systemPromptEdit")
    prompt.moveCursor(prompt.textCursor().MoveOperation.End)
    qtbot.keyClicks(prompt, " Use lists.")
    w(d, QComboBox, "themeCombo").setCurrentIndex(1)
    w(d, QSpinBox, "fontSizeSpin").setValue(20)
    click(qtbot, d, "okButton")
    assert d.result() == QDialog.DialogCode.Accepted, error_text(d)

    shown = replace(
        SAMPLE,
        model=str(folder),
        device="cpu",
        dtype="bfloat16",
        backend="torch",
        seed=42,
        draft_model="org/draft-model",
        datastore=str(index),
        drafters={"retrieval": True, "learned": False, "context": True, "model": True, "recurrent": False},
        temperature=1.25,
        top_k=0,
        threads=1,
        system_prompt="Be brief. Use lists.",
        theme="light",
        font_size=20,
    )
    result = d.result_settings()
    assert result == shown
    path = save_settings(result, tmp_path / "cfg" / "settings.json")
    loaded, notices = load_settings(path)
    assert notices == []
    assert loaded == shown
    # Untouched fields kept, and the caller's object never edited.
    assert (loaded.top_p, loaded.max_new_tokens, loaded.repetition_penalty) == (0.9, 256, 1.1)
    assert SAMPLE == original


def test_cancel_leaves_the_original_untouched(qtbot):
    original = copy.deepcopy(SAMPLE)
    d = open_dialog(qtbot, SAMPLE)
    w(d, QLineEdit, "modelEdit").setText("other/model")
    w(d, QDoubleSpinBox, "temperatureSpin").setValue(3.0)
    w(d, QCheckBox, "drafterContext").setChecked(False)
    click(qtbot, d, "cancelButton")
    assert d.result() == QDialog.DialogCode.Rejected
    assert not d.isVisible()
    assert SAMPLE == original


def test_restore_defaults_resets_the_form(qtbot):
    d = open_dialog(qtbot, SAMPLE)
    click(qtbot, d, "restoreDefaultsButton")
    assert d.result_settings() == Settings()
    assert w(d, QComboBox, "deviceCombo").currentText() == "auto"
    assert w(d, QComboBox, "modelCombo").currentData() == "smollm2-135m"
    assert not w(d, QLineEdit, "modelEdit").isVisible()


def test_model_drafter_needs_a_draft_model(qtbot):
    d = open_dialog(qtbot, Settings())
    box = w(d, QCheckBox, "drafterModel")
    assert not box.isEnabled() and "draft model" in box.toolTip()
    combo = w(d, QComboBox, "draftModelCombo")
    choose_other(combo)
    assert not box.isEnabled()  # Other, but nothing entered yet
    qtbot.keyClicks(w(d, QLineEdit, "draftModelEdit"), "org/small")
    assert box.isEnabled()
    choose(combo, "")
    assert not box.isEnabled() and d.result_settings().draft_model == ""
    # text put in the line edit by other code chooses Other
    w(d, QLineEdit, "draftModelEdit").setText("org/other")
    assert combo.currentData() == OTHER and box.isEnabled()


def test_missing_model_path_is_refused_until_fixed(qtbot, tmp_path):
    d = open_dialog(qtbot, Settings())
    missing = tmp_path / "nowhere" / "model.gguf"
    choose_other(w(d, QComboBox, "modelCombo"))
    model = w(d, QLineEdit, "modelEdit")
    model.setText(str(missing))
    click(qtbot, d, "okButton")
    assert d.isVisible() and d.result() != QDialog.DialogCode.Accepted
    assert w(d, QLabel, "settingsError").isVisible()
    assert "Model" in error_text(d) and str(missing) in error_text(d)
    # A bare .gguf name is a path too, never a hub id.
    model.setText("model.gguf")
    click(qtbot, d, "okButton")
    assert d.isVisible() and "model.gguf" in error_text(d)

    model.setText(str(model_folder(tmp_path)))
    click(qtbot, d, "okButton")
    assert d.result() == QDialog.DialogCode.Accepted
    assert not w(d, QLabel, "settingsError").isVisible()


def test_hub_ids_are_accepted_as_typed(qtbot):
    d = open_dialog(qtbot, Settings())
    w(d, QLineEdit, "modelEdit").setText("someone/some-model")  # chooses Other, as the chat window's test relies on
    assert w(d, QComboBox, "modelCombo").currentData() == OTHER
    click(qtbot, d, "okButton")
    assert d.result() == QDialog.DialogCode.Accepted
    assert d.result_settings().model == "someone/some-model"


def test_empty_model_is_refused(qtbot):
    d = open_dialog(qtbot, Settings())
    choose_other(w(d, QComboBox, "modelCombo"))
    w(d, QLineEdit, "modelEdit").clear()
    click(qtbot, d, "okButton")
    assert d.isVisible() and "Model: choose a model" in error_text(d)
    choose(w(d, QComboBox, "modelCombo"), "smollm2-135m")  # the model in use: no download needed to keep it
    click(qtbot, d, "okButton")
    assert d.result() == QDialog.DialogCode.Accepted
    assert d.result_settings().model == "default"


def test_bad_datastore_is_refused_with_the_readers_message(qtbot, tmp_path):
    junk = tmp_path / "junk.idx"
    junk.write_bytes(os.urandom(300))
    d = open_dialog(qtbot, Settings())
    tabs = w(d, QTabWidget, "settingsTabs")
    datastore = w(d, QLineEdit, "datastoreEdit")
    datastore.setText(str(junk))
    click(qtbot, d, "okButton")
    assert d.isVisible()
    assert "Datastore" in error_text(d) and "not a Draftscope index" in error_text(d)
    assert tabs.tabText(tabs.currentIndex()) == "Drafting"  # the problem's tab is brought forward

    datastore.setText(str(tmp_path / "missing.idx"))
    click(qtbot, d, "okButton")
    assert d.isVisible() and "does not exist" in error_text(d)

    datastore.clear()  # empty: the default datastore, whether built or not
    click(qtbot, d, "okButton")
    assert d.result() == QDialog.DialogCode.Accepted


def test_datastore_placeholder_names_the_default(qtbot, tmp_path):
    d = open_dialog(qtbot, Settings())
    text = w(d, QLineEdit, "datastoreEdit").placeholderText()
    assert str(tmp_path / "data") in text and "not built yet" in text


def test_corrupt_settings_file_gives_defaults_and_the_dialog_opens(qtbot, tmp_path):
    path = tmp_path / "settings.json"
    path.write_bytes(b"\x00\xffnot json{{")
    settings, notices = load_settings(path)
    assert settings == Settings()
    assert len(notices) == 1 and "could not be read" in notices[0]
    d = open_dialog(qtbot, settings)
    assert d.result_settings() == Settings()
    click(qtbot, d, "okButton")
    assert d.result() == QDialog.DialogCode.Accepted


def test_wrong_typed_field_keeps_the_others(qtbot, tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "temperature": "hot", "top_k": 7, "theme": "dark", "font_size": 16}))
    settings, notices = load_settings(path)
    assert settings == Settings(top_k=7, theme="dark", font_size=16)
    assert len(notices) == 1 and "temperature" in notices[0]
    d = open_dialog(qtbot, settings)
    assert w(d, QSpinBox, "topKSpin").value() == 7
    assert w(d, QComboBox, "themeCombo").currentData() == "dark"
    assert w(d, QSpinBox, "fontSizeSpin").value() == 16


def test_changed_fields():
    base = Settings()
    assert changed_fields(base, Settings()) == set()
    assert changed_fields(base, replace(base, model="org/m")) == {"model"}
    assert changed_fields(base, replace(base, device="cpu", temperature=0.5)) == {"device", "temperature"}
    assert change_between(base, replace(base, theme="dark")) == Change.LOOK
    assert set(Section.MODEL.names) == {
        "model",
        "device",
        "dtype",
        "backend",
        "draft_model",
        "workers",
        "threads",
        "context_length",
        "gpu_layers",
    }  # these reopen the model
    assert change_between(base, replace(base, dtype="bfloat16")) == Change.MODEL
    assert change_between(base, replace(base, gpu_layers=0)) == Change.MODEL  # llama.cpp places layers at load
    assert change_between(base, replace(base, temperature=0.5, system_prompt="x")) == Change.NONE
    assert change_between(base, replace(base, server_port=9000, datastore="x.idx")) == Change.SERVER | Change.DRAFTERS


def test_changed_fields_from_the_dialog(qtbot):
    s = replace(Settings(), temperature=0.123)  # finer than the spin box shows
    d = open_dialog(qtbot, s)
    assert changed_fields(s, d.result_settings()) == set()
    device = w(d, QComboBox, "deviceCombo")
    device.setCurrentIndex(device.findData("cpu"))
    w(d, QSpinBox, "fontSizeSpin").setValue(13)
    assert changed_fields(s, d.result_settings()) == {"device", "font_size"}


def test_detected_devices_include_auto_and_cpu(qtbot):
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    combo = w(d, QComboBox, "deviceCombo")
    items = [combo.itemData(i) for i in range(combo.count())]
    assert items[:2] == ["auto", "cpu"] and "(not available)" not in combo.currentText()


def test_the_dialog_fits_a_small_screen(qtbot):
    """Every tab's text wraps: no line of explanation may widen the dialog past a 1024-pixel screen
    (the seed's hint, unwrapped, once made it 1,124 pixels wide)."""
    from PySide6.QtWidgets import QTabWidget

    dialog = open_dialog(qtbot, Settings())
    tabs = w(dialog, QTabWidget, "settingsTabs")
    widths = {tabs.tabText(i): tabs.widget(i).minimumSizeHint().width() for i in range(tabs.count())}
    assert max(widths.values()) <= 800, widths
    assert dialog.minimumSizeHint().width() <= 900 and dialog.width() <= 900, dialog.size()
