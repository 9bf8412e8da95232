"""The settings dialog's GPU-layers row (offscreen Qt, real widgets): the spin box shows and saves
Settings.gpu_layers where llama.cpp found a card (a fake one here), and is disabled, saying why,
where the setting would do nothing: no card, the torch backend, the CPU as the device, RPC workers.
The status bar's layers and memory: tests/gui/test_gui_llamacpp.py."""

import os
from dataclasses import replace

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDialog, QLabel, QLineEdit, QPushButton, QSpinBox

from draftscope.engine.backends.llama import gpu_offload
from draftscope.engine.backends.llama.gpu_offload import Card
from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.rules import GPU_LAYERS_ALL, GPU_LAYERS_AUTO
from draftscope.storage import Settings, load_settings, save_settings

pytestmark = pytest.mark.usefixtures("own_data_and_cache")

RTX = Card("CUDA0", "NVIDIA GeForce RTX 4070", 11_000_000_000, 12_000_000_000)


@pytest.fixture
def one_card(monkeypatch):
    monkeypatch.setattr(gpu_offload, "cards", lambda: [RTX])


@pytest.fixture
def no_card(monkeypatch):
    monkeypatch.setattr(gpu_offload, "cards", lambda: [])


def open_dialog(qtbot, settings):
    dialog = SettingsDialog(settings, devices=("cpu", "cuda"))
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def w(dialog, cls, name):
    widget = dialog.findChild(cls, name)
    assert widget is not None, name
    return widget


def choose(combo, data):
    combo.setCurrentIndex(combo.findData(data))


@pytest.mark.usefixtures("one_card")
def test_the_spin_shows_the_stored_layers_and_saves_a_new_count(qtbot, tmp_path):
    d = open_dialog(qtbot, Settings(gpu_layers=12))
    spin = w(d, QSpinBox, "gpuLayersSpin")
    assert spin.isEnabled() and spin.value() == 12
    assert (spin.minimum(), spin.maximum()) == (GPU_LAYERS_AUTO, GPU_LAYERS_ALL)
    hint = w(d, QLabel, "gpuLayersHint").text()
    assert "NVIDIA GeForce RTX 4070" in hint and "11.0 GB free of 12.0 GB" in hint
    assert "0 keeps the model on the CPU" in hint and "999" in hint
    assert spin.toolTip().startswith(hint) and "CUDA0" in spin.toolTip()
    assert "GGUF models on llama.cpp" in spin.toolTip() and "loads the model again" in spin.toolTip()
    spin.setValue(0)
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.result() == QDialog.DialogCode.Accepted, w(d, QLabel, "settingsError").text()
    result = d.result_settings()
    assert result == Settings(gpu_layers=0)
    loaded, notices = load_settings(save_settings(result, tmp_path / "cfg" / "settings.json"))
    assert notices == [] and loaded.gpu_layers == 0


@pytest.mark.usefixtures("one_card")
def test_auto_is_the_default_and_said_in_words(qtbot):
    d = open_dialog(qtbot, Settings(gpu_layers=GPU_LAYERS_ALL))
    spin = w(d, QSpinBox, "gpuLayersSpin")
    assert spin.text() == "999 layers"
    qtbot.mouseClick(w(d, QPushButton, "restoreDefaultsButton"), Qt.MouseButton.LeftButton)
    assert spin.value() == GPU_LAYERS_AUTO and spin.text() == "auto (as many as fit)"
    assert d.result_settings().gpu_layers == GPU_LAYERS_AUTO


@pytest.mark.usefixtures("no_card")
def test_without_a_card_the_row_is_disabled_and_says_why(qtbot):
    d = open_dialog(qtbot, Settings(gpu_layers=20))
    spin = w(d, QSpinBox, "gpuLayersSpin")
    assert not spin.isEnabled()
    for why in (spin.toolTip(), w(d, QLabel, "gpuLayersHint").text()):
        assert "llama.cpp found no graphics card on this computer: GGUF models run on the CPU" in why
        assert "scripts/build_llama_cuda.sh" in why
    # the stored count waits, unchanged, for a computer where it applies
    assert d.result_settings().gpu_layers == 20


@pytest.mark.usefixtures("one_card")
def test_the_row_is_disabled_where_the_choices_put_no_layer_on_the_card(qtbot):
    d = open_dialog(qtbot, Settings())
    spin = w(d, QSpinBox, "gpuLayersSpin")
    backend, device = w(d, QComboBox, "backendCombo"), w(d, QComboBox, "deviceCombo")
    choose(backend, "torch")
    assert not spin.isEnabled() and "torch backend" in spin.toolTip()
    choose(backend, "llama.cpp")
    assert spin.isEnabled()
    choose(device, "cpu")
    assert not spin.isEnabled() and "The device is cpu" in spin.toolTip()
    choose(device, "cuda")
    assert spin.isEnabled()
    qtbot.keyClicks(w(d, QLineEdit, "workersEdit"), "10.0.0.2:50052")
    assert not spin.isEnabled() and "RPC workers" in spin.toolTip()
    w(d, QLineEdit, "workersEdit").clear()
    assert spin.isEnabled()


@pytest.mark.usefixtures("one_card")
def test_a_stored_torch_backend_opens_with_the_row_disabled(qtbot):
    d = open_dialog(qtbot, replace(Settings(), backend="torch", gpu_layers=8))
    spin = w(d, QSpinBox, "gpuLayersSpin")
    assert not spin.isEnabled() and spin.value() == 8
