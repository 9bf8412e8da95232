"""Settings ▸ Generation and the model's recommended sampling (offscreen Qt): while the switch is on,
the fields the model's GGUF sets show its values, greyed; the user's own values are what is saved,
and come back when the switch is turned off. The new rows (min-p, the penalty's window, the
length limit's "until the model stops") round-trip."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QLabel, QSpinBox
from sampling_fixtures import write_gguf

from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.storage import Settings

pytestmark = pytest.mark.usefixtures("own_data_and_cache")


def open_dialog(qtbot, settings):
    dialog = SettingsDialog(settings, devices=("cpu",))
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def w(dialog, cls, name):
    widget = dialog.findChild(cls, name)
    assert widget is not None, name
    return widget


def test_the_fields_the_model_sets_show_its_values_greyed_and_the_users_are_saved(qtbot, tmp_path):
    path = write_gguf(tmp_path / "tuned.gguf", temp=0.6, top_k=20, penalty_last_n=128)
    settings = Settings(model=str(path), temperature=1.3, top_k=7)
    d = open_dialog(qtbot, settings)
    check = w(d, QCheckBox, "modelSamplingCheck")
    temperature, top_k = w(d, QDoubleSpinBox, "temperatureSpin"), w(d, QSpinBox, "topKSpin")
    window, top_p = w(d, QSpinBox, "repetitionWindowSpin"), w(d, QDoubleSpinBox, "topPSpin")
    assert check.isChecked()
    assert (temperature.value(), top_k.value(), window.value()) == (pytest.approx(0.6), 20, 128)
    assert not temperature.isEnabled() and not top_k.isEnabled() and not window.isEnabled()
    assert top_p.isEnabled() and top_p.value() == pytest.approx(settings.top_p), (
        "a field the model leaves is the user's"
    )
    note = w(d, QLabel, "modelSamplingNote").text()
    assert "temperature" in note and "top k" in note and "GGUF" in note
    kept = d.result_settings()
    assert (kept.temperature, kept.top_k, kept.model_sampling) == (1.3, 7, True), "the model's values are not saved"

    check.setChecked(False)
    assert (temperature.value(), top_k.value()) == (pytest.approx(1.3), 7) and temperature.isEnabled()
    temperature.setValue(0.9)
    off = d.result_settings()
    assert (off.temperature, off.model_sampling) == (pytest.approx(0.9), False)
    check.setChecked(True)
    assert temperature.value() == pytest.approx(0.6) and d.result_settings().temperature == pytest.approx(0.9)


def test_a_model_without_a_recommendation_leaves_every_field_to_the_user(qtbot, tmp_path):
    d = open_dialog(qtbot, Settings(model=str(write_gguf(tmp_path / "plain.gguf"))))
    assert w(d, QDoubleSpinBox, "temperatureSpin").isEnabled()
    assert "recommend no sampling" in w(d, QLabel, "modelSamplingNote").text()


def test_min_p_the_window_and_until_the_model_stops_round_trip(qtbot):
    d = open_dialog(qtbot, Settings(model_sampling=False))
    length = w(d, QSpinBox, "maxNewTokensSpin")
    assert length.value() == 0 and length.text() == "until the model stops"
    assert w(d, QDoubleSpinBox, "minPSpin").value() == pytest.approx(0.05)
    w(d, QDoubleSpinBox, "minPSpin").setValue(0.1)
    w(d, QSpinBox, "repetitionWindowSpin").setValue(256)
    length.setValue(1024)
    got = d.result_settings()
    assert (got.min_p, got.repetition_window, got.max_new_tokens) == (pytest.approx(0.1), 256, 1024)
