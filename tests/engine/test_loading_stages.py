"""Opening a model says what it does: each stage by name, in order, with how far it is and the time
left where that can be estimated (engine/stages.py, gui/loading.py); the plain-speed measurement
waits for the window, which opens first and shows it in the status bar."""

import functools
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import need_llama_cpp
from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QLabel, QProgressDialog

from draftscope.core.runtime import load_runtime
from draftscope.engine.stages import (
    CHECKING_LLAMA,
    LOADING_WEIGHTS,
    MEASURING_COSTS,
    MEASURING_SPEED,
    Stage,
    as_stage,
)
from draftscope.storage import HistoryStore
from draftscope.storage.settings import Settings


class Heard(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.reports = []

    @Slot(object)
    def add(self, report) -> None:
        self.reports.append(report)


def test_the_loading_dialog_shows_a_stage_its_fraction_and_the_time_left(qtbot):
    from draftscope.gui.loading import LoadingProgress

    dialog = QProgressDialog("Loading tiny …", "Quit", 0, 0)
    qtbot.addWidget(dialog)
    stages = LoadingProgress(dialog)
    stages.begin("Loading tiny …")
    stages.report(Stage(MEASURING_COSTS, 0.5, 150.0))
    assert dialog.labelText() == "Loading tiny …\nmeasuring verify costs · 50% · about 2 min 30 s left"
    assert (dialog.maximum(), dialog.value()) == (1000, 500)
    stages.report(Stage(MEASURING_COSTS, 1.0, 0.0))
    assert dialog.value() == 1000 and not dialog.wasCanceled(), "a finished stage does not reset the dialog"
    stages.report(Stage(CHECKING_LLAMA))  # no fraction known: a busy bar and the time so far
    assert dialog.maximum() == 0 and dialog.labelText().endswith("checking llama.cpp on this CPU · 0 s so far")


def test_a_real_load_names_its_stages_in_order_and_the_window_opens_before_the_plain_speed_is_measured(
    qtbot, tokenizer, tokenizer_dir, tmp_path
):
    need_llama_cpp()
    from draftscope.gui.launcher import Launcher

    model = write_tiny_gguf(tmp_path / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=3), tokenizer_dir)
    settings = Settings(model=str(model), backend="llama.cpp", threads=1, datastore=str(tmp_path / "none.idx"))
    heard = Heard()  # on this thread, as the dialog: the measurements report from the model's own thread
    launcher = Launcher(functools.partial(load_runtime, baseline=False), HistoryStore(tmp_path / "h.sqlite3"), settings)
    launcher.loader.progress.connect(heard.add)
    with qtbot.waitSignal(launcher.window_ready, timeout=120_000) as ready:
        launcher.start()
    window = ready.args[0]
    qtbot.addWidget(window)
    baseline = window.findChild(QLabel, "statusBaseline")
    at_open = baseline.text()

    stages = [as_stage(r) for r in heard.reports]
    names = [s.name for i, s in enumerate(stages) if i == 0 or s.name != stages[i - 1].name]
    assert names[0].startswith("loading ") and names[-1] == MEASURING_COSTS, names
    assert [n for n in names if n in (CHECKING_LLAMA, LOADING_WEIGHTS, MEASURING_COSTS)] == [
        n for n in (CHECKING_LLAMA, LOADING_WEIGHTS, MEASURING_COSTS) if n in names
    ], "stages out of order"
    assert LOADING_WEIGHTS in names and MEASURING_SPEED not in names, names
    assert len(names) == len(set(names)), f"a stage came back after another began: {names}"
    costs = [s.fraction for s in stages if s.name == MEASURING_COSTS]
    assert len(costs) > 3 and costs == sorted(costs) and costs[0] == 0.0 and costs[-1] == 1.0, costs
    assert all(0.0 <= f <= 1.0 for s in stages if (f := s.fraction) is not None)
    assert any(s.seconds_left is not None for s in stages if s.name == MEASURING_COSTS), "no time left was estimated"
    assert [s.name for s in launcher.stages.seen][-1] == MEASURING_COSTS, "the dialog showed the stages"

    # the window opened with the measurement still to come; it arrives in the status bar
    assert at_open.startswith("plain: measuring"), at_open
    assert window.engine.verify_costs is not None
    qtbot.waitUntil(lambda: "tokens/s" in baseline.text(), timeout=60_000)
    assert window.engine.baseline_tokens_per_second > 0
    window.close()
