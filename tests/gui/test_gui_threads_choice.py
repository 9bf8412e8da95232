"""Settings ▸ Generation ▸ Threads reads top to bottom (offscreen Qt): Automatic (the setting's 0),
every core, one core left free, then fewer down to one; a value past this computer's cores, from a
settings file made elsewhere, is kept as it is."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from draftscope.gui.threads_choice import ThreadsCombo, thread_choices


def test_the_choices_run_from_automatic_down_to_one_thread():
    assert thread_choices(4) == [
        ("Automatic (all cores or one left free)", 0),
        ("All 4 cores", 4),
        ("3 (one core left free)", 3),
        ("2 (2 cores left free)", 2),
        ("1 (3 cores left free)", 1),
    ]
    assert [v for _, v in thread_choices(1)] == [0, 1]


def test_the_combo_speaks_the_setting_and_keeps_a_value_from_elsewhere(qtbot):
    combo = ThreadsCombo(cores=4)
    qtbot.addWidget(combo)
    assert combo.value() == 0 and combo.currentText().startswith("Automatic")
    combo.setValue(3)
    assert combo.currentText() == "3 (one core left free)" and combo.value() == 3
    combo.setValue(12)
    assert combo.value() == 12 and "more than this computer's 4 cores" in combo.currentText()
    combo.setCurrentIndex(combo.count() - 2)  # the list's last core choice: one thread
    assert combo.value() == 1
