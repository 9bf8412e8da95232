"""Settings ▸ Generation's sampling rows are generated from SamplingParams' declaration (offscreen
Qt): a spin box per field in its declared range, labelled, showing the settings' value and saving
the user's; a field declared tomorrow gets its row with no other edit."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QLabel, QSpinBox

from draftscope.gui.dialogs.settings_tabs import GenerationTab
from draftscope.rules import SAMPLING_FIELDS, Range, SamplingField
from draftscope.storage import Settings

pytestmark = pytest.mark.usefixtures("own_data_and_cache")


def tab(qtbot) -> GenerationTab:
    generation = GenerationTab()
    qtbot.addWidget(generation)
    return generation


def labels(widget) -> set[str]:
    return {label.text() for label in widget.findChildren(QLabel)}


def test_each_declared_field_has_a_spin_box_in_its_range_and_round_trips(qtbot):
    generation = tab(qtbot)
    asked = {name: declared.range.high for name, declared in SAMPLING_FIELDS.items()}
    settings = Settings(model_sampling=False, **asked)
    generation.show_settings(settings)
    for name, declared in SAMPLING_FIELDS.items():
        spin = generation.sampling[name]
        assert isinstance(spin, QSpinBox if declared.whole else QDoubleSpinBox), name
        assert spin.maximum() == declared.range.high and spin.value() == asked[name], name
        assert spin.minimum() >= declared.range.low, name
        assert generation.fields[name] is spin
    assert {f"{d.label}:" for d in SAMPLING_FIELDS.values() if not d.beside} <= labels(generation)
    saved = generation.values(settings)
    assert {name: saved[name] for name in asked} == asked


def test_a_newly_declared_field_gets_its_row(qtbot, monkeypatch):
    typical = SamplingField(Range(0.0, 1.0, open_low=True), 1.0, "Typical-p", "keep the typical tokens", "1 = off")
    monkeypatch.setitem(SAMPLING_FIELDS, "typical_p", typical)
    generation = tab(qtbot)
    spin = generation.findChild(QAbstractSpinBox, "typicalPSpin")
    assert spin is generation.sampling["typical_p"] and spin.maximum() == 1.0 and spin.minimum() > 0
    assert {"Typical-p:", "1 = off"} <= labels(generation)
