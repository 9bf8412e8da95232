"""Install PyTorch from the window: what needs it, the download's size (the CPU build without an
NVIDIA card, the CUDA build with one: ``optional_torch.install_plan``), and Install, which runs
``python -m pip install`` in a QProcess (the window keeps answering) with pip's download shown as a
catalogue model's download is: a bar with Cancel and the bytes, rate and time left under it.
Cancel ends pip; a failure shows why in words with pip's own last lines, and nothing else changes.
``installed(now)`` is emitted once pip has succeeded (``now``: usable without a restart).

Where the window meets PyTorch missing it offers this dialog (``offer_install``): Settings ▸ Model,
training the recurrent drafter, learning a model's style, and a model that failed to load for want
of it (``install_action`` on the load's error box)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable

from PySide6.QtCore import QProcess, QProcessEnvironment, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QDialog, QHBoxLayout, QMessageBox, QProgressBar, QPushButton, QVBoxLayout, QWidget

from draftscope import optional_torch
from draftscope.gui.fit_screen import fit_dialog, grow_to
from draftscope.gui.form_widgets import FittedLabel, hint, progress_row, show_error
from draftscope.gui.jobs import TransferRate
from draftscope.gui.pip_install import PipOutput, build_words, install_arguments, usable_without_restart
from draftscope.optional_torch import InstallPlan

USES = (
    "PyTorch runs the torch backend and Hugging Face models (folders, safetensors), trains the recurrent "
    "drafter and learns a model's style. GGUF models on llama.cpp need none of it."
)
WHAT = "PyTorch"  # how the download is named on its progress line


class TorchInstallDialog(QDialog):
    """``TorchInstallDialog(what)``: ``what`` needs PyTorch ("" when nothing in particular asked);
    ``plan`` is how it installs (default: ``optional_torch.install_plan()``, for this machine)."""

    installed = Signal(bool)  # pip succeeded; True: usable without restarting Draftscope

    def __init__(self, what: str = "", *, plan: InstallPlan | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.what = what
        self.plan = plan if plan is not None else optional_torch.install_plan()
        self.process: QProcess | None = None
        self.output = PipOutput(self.plan.download_bytes)
        self._rate = TransferRate()
        self._cancelled = False
        self._temp = ""  # pip's temporary folder, ours: a killed pip leaves nothing behind
        self._partial = ""  # pip's output line not ended yet
        self.setObjectName("torchInstallDialog")
        self.setWindowTitle("Install PyTorch")
        self.setMinimumWidth(560)
        self._build()
        fit_dialog(self)

    # --- building ------------------------------------------------------------------------------

    def _build(self) -> None:
        needed = (
            f"{self.what[:1].upper()}{self.what[1:]} needs PyTorch, which is not installed here."
            if self.what
            else "PyTorch is not installed here."
        )
        heading = FittedLabel(needed, objectName="torchNeeded")
        heading.setWordWrap(True)
        font = QFont(heading.font())
        font.setBold(True)
        heading.setFont(font)
        uses = FittedLabel(USES, objectName="torchUses")
        uses.setWordWrap(True)
        build = build_words(self.plan)
        self.size_label = FittedLabel(
            f"Download: {self.plan.size_words}" + (f": {build}." if build else "."), objectName="torchSize"
        )
        self.size_label.setWordWrap(True)
        command = hint(f"Runs {self.plan.command_words} for {sys.executable}", wrap=True, objectName="torchCommand")
        command.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress = QProgressBar(objectName="torchInstallProgress")
        self.cancel_button = QPushButton("Cancel", objectName="cancelTorchInstallButton")
        self.cancel_button.clicked.connect(self.cancel)
        self.bar_row = progress_row(self.progress, self.cancel_button)
        self.bar_row.hide()
        self.status = FittedLabel(objectName="torchInstallStatus", wordWrap=True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error = FittedLabel(objectName="torchInstallError", wordWrap=True)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        show_error(self.error)
        for label in (self.status, self.error):
            label.hide()
        layout = QVBoxLayout(self)
        for widget in (heading, uses, self.size_label, command, self.bar_row, self.status, self.error):
            layout.addWidget(widget)
        layout.addStretch(1)
        layout.addLayout(self._buttons())

    def _buttons(self) -> QHBoxLayout:
        self.install_button = QPushButton("Install", objectName="installTorchButton")
        self.install_button.clicked.connect(self.install)
        self.install_button.setDefault(True)
        self.close_button = QPushButton("Close", objectName="closeTorchInstallButton")
        self.close_button.clicked.connect(self.reject)
        if getattr(sys, "frozen", False):  # the bundle has no pip, and no place for PyTorch
            self.install_button.setEnabled(False)
            self._say(
                "This is the bundled app, which cannot take PyTorch in: install Draftscope with pip "
                f"(pip install '{optional_torch.EXTRA}') to use what needs it."
            )
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.install_button)
        buttons.addWidget(self.close_button)
        return buttons

    # --- running pip ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.state() != QProcess.ProcessState.NotRunning

    def install(self) -> None:
        """Run pip (off the UI thread: a QProcess); its output is read as it comes."""
        if self.running:
            return
        self.output = PipOutput(self.plan.download_bytes)
        self._rate.restart()
        self._cancelled, self._partial = False, ""
        self._temp = tempfile.mkdtemp(prefix="draftscope-pip-")
        process = self.process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        env = QProcessEnvironment.systemEnvironment()
        for name, value in (("PYTHONUNBUFFERED", "1"), ("PIP_NO_INPUT", "1")):
            env.insert(name, value)
        for name in ("TMPDIR", "TEMP", "TMP"):
            env.insert(name, self._temp)
        process.setProcessEnvironment(env)
        process.readyReadStandardOutput.connect(self._read)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._failed_to_start)
        self.error.hide()
        self.install_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setRange(0, 0)  # busy until pip reports bytes
        self.bar_row.show()
        self._say("Starting pip …")
        process.start(sys.executable, install_arguments(self.plan))

    def cancel(self) -> bool:
        """End pip (it is killed: nothing it half-downloaded is kept); True when it was running."""
        if not self.running or self.output.installing:  # killed while unpacking, torch would be left half-installed
            return False
        self._cancelled = True
        self.cancel_button.setEnabled(False)
        self._say("Cancelling …")
        self.process.kill()
        return True

    def _read(self) -> None:
        text = self._partial + bytes(self.process.readAllStandardOutput().data()).decode("utf-8", "replace")
        *lines, self._partial = text.replace("\r", "\n").split("\n")
        if any([self.output.feed(line) for line in lines]) and not self._cancelled:
            self._show_output()
        if self.output.installing and self.cancel_button.isEnabled():
            self.cancel_button.setEnabled(False)
            self.cancel_button.setToolTip("pip is unpacking PyTorch: stopped now, it would be left half-installed")

    def _show_output(self) -> None:
        out = self.output
        if out.installing or not out.downloaded_any:
            self.progress.setRange(0, 0)
            line = ""
        else:
            line = self._rate.show(self.progress, f"Downloading {WHAT}", out.done, out.total)
        self._say("\n".join(t for t in (line, out.step) if t))

    def _finished(self, exit_code: int, exit_status: QProcess.ExitStatus) -> None:
        if self._partial:
            self.output.feed(self._partial)
        shutil.rmtree(self._temp, ignore_errors=True)
        self.bar_row.hide()
        self.install_button.setEnabled(True)
        if self._cancelled:
            self._say(
                "Cancelled: pip was stopped"
                + (" while installing; Install runs it again to finish." if self.output.installing else ".")
                + " PyTorch is not installed."
            )
        elif exit_status == QProcess.ExitStatus.NormalExit and exit_code == 0:
            self._succeeded()
        else:
            self._fail(self.output.failure(exit_code))

    def _failed_to_start(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            shutil.rmtree(self._temp, ignore_errors=True)
            self.bar_row.hide()
            self.install_button.setEnabled(True)
            self._fail(f"pip could not be started ({self.process.errorString()}). Draftscope runs as before.")

    def _succeeded(self) -> None:
        now = usable_without_restart()
        if now:
            words = "PyTorch installed, ready without a restart" + (f": {self.what} can run now." if self.what else ".")
        else:  # not found by this process, or transformers was loaded without it
            words = "PyTorch installed. Restart Draftscope to use it" + (f" ({self.what})." if self.what else ".")
        self._say(words)
        self.install_button.hide()
        self.close_button.setText("Done")
        self.close_button.setDefault(True)
        self.installed.emit(now)

    def _fail(self, words: str) -> None:
        self._say("")
        self.error.setText(words)
        self.error.show()
        self.install_button.setText("Try again")
        self._fit()

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))
        self._fit()

    def _fit(self) -> None:
        layout = self.layout()
        layout.activate()
        if layout.hasHeightForWidth():
            grow_to(self, layout.totalHeightForWidth(self.width()))

    # --- closing -------------------------------------------------------------------------------

    def done(self, result: int) -> None:
        """Closing while pip runs ends it first (a pip left running would install behind the window's back)."""
        if self.running and self.output.installing:
            self._say("Installing: this closes when pip has finished (stopped now, PyTorch would be half-installed).")
            return
        if self.cancel():
            self.process.waitForFinished(5000)
        super().done(result)


def offer_install(parent: QWidget, what: str, on_ready: Callable[[], None] | None = None) -> TorchInstallDialog:
    """Open the dialog over ``parent`` (window-modal) for ``what``; ``on_ready()`` once PyTorch is
    installed and usable without a restart."""
    dialog = TorchInstallDialog(what, parent=parent)
    dialog.setWindowModality(Qt.WindowModality.WindowModal)
    if on_ready is not None:
        dialog.installed.connect(lambda now: on_ready() if now else None)
    parent.torch_install_dialog = dialog  # kept: an open dialog must not be collected
    dialog.open()
    return dialog


def install_action(box: QMessageBox, error: BaseException | None, after: Callable[[], None]) -> dict:
    """A model load that failed for want of PyTorch: an "Install PyTorch…" button on its error
    ``box``, which opens the dialog; once PyTorch can be used, ``after()`` (the load again), else the
    box comes back. Returns {button: what it does} for the box's dispatch ({} for another error)."""
    if not isinstance(error, optional_torch.TorchMissing):
        return {}
    button = box.addButton("Install PyTorch…", QMessageBox.ButtonRole.ActionRole)
    button.setObjectName("installTorchAction")

    def open_dialog() -> None:
        dialog = offer_install(box.parentWidget() or box, error.what)
        ready: list[bool] = []
        dialog.installed.connect(ready.append)
        dialog.finished.connect(lambda _result: after() if any(ready) else box.open())

    return {button: open_dialog}
