"""The loading screen's words: each stage of opening a model by name (engine/stages.py), a bar
that fills where the stage knows how far it is (busy where it does not), and the time left where
it can be estimated, else the time the stage has taken so far, so a long stage never looks stuck."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QProgressDialog, QWidget

from draftscope.engine.stages import Stage, as_stage, time_left

STEPS = 1000  # the bar's resolution


class LoadingProgress:
    """Drives ``dialog`` (a QProgressDialog) from a load's progress reports."""

    def __init__(self, dialog: QProgressDialog) -> None:
        self.dialog = dialog
        dialog.setAutoReset(False)  # a stage that reaches 100 % must not hide the dialog
        dialog.setAutoClose(False)
        self.heading = dialog.labelText()
        self.stage: Stage | None = None
        self.began = time.monotonic()
        self.seen: list[Stage] = []  # every stage report of this load, in order (what the dialog showed)
        self.ticker = QTimer(dialog, interval=1000)
        self.ticker.timeout.connect(self._show)

    def begin(self, heading: str) -> None:
        """A new load: ``heading`` names the model; no stage yet."""
        self.heading, self.stage, self.seen = heading, None, []
        self.dialog.setRange(0, 0)
        self.dialog.setLabelText(heading)
        self.ticker.start()

    def end(self) -> None:
        self.ticker.stop()

    def report(self, report) -> None:
        stage = as_stage(report)
        if self.stage is None or stage.name != self.stage.name:
            self.began = time.monotonic()
        self.stage = stage
        self.seen.append(stage)
        if stage.fraction is None:
            self.dialog.setRange(0, 0)  # busy: how far it is is not known
        else:
            self.dialog.setRange(0, STEPS)
            self.dialog.setValue(round(stage.fraction * STEPS))
        self._show()

    def _show(self) -> None:
        stage = self.stage
        if stage is None:
            return
        line = str(stage)
        if stage.seconds_left is None:  # no estimate: how long it has taken says it is still moving
            line += f" · {time_left(time.monotonic() - self.began)} so far"
        self.dialog.setLabelText(f"{self.heading}\n{line}")


def show_over(dialog: QProgressDialog, window: QWidget | None) -> None:
    """Show the loading dialog, over ``window`` when there is one (a reload's: a dialog of the window,
    it stays above it and opens on its screen; with none, at start, on its own)."""
    if dialog.parentWidget() is not window:
        dialog.setParent(window, dialog.windowFlags())  # still a dialog (setParent alone would embed it)
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()


def release(dialog: QProgressDialog) -> None:
    """The dialog no longer belongs to the window a reload lets go (deleted with it otherwise)."""
    if dialog.parentWidget() is not None:
        dialog.setParent(None, dialog.windowFlags())
