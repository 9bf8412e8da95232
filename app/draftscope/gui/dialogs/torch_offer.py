"""Settings ▸ Model's PyTorch row, shown while PyTorch is not installed: what needs it, the download's
size and an "Install PyTorch…" button (gui/dialogs/torch_install.py). When the form chooses what
needs it (the torch backend, a precision: torch's), the row says so."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from draftscope import optional_torch
from draftscope.gui.dialogs.torch_install import offer_install
from draftscope.gui.form_widgets import FitsWidth, FittedLabel, show_error

NEEDS = (
    "The torch backend, Hugging Face models, training the recurrent drafter and learning a model's style "
    "need it; GGUF models on llama.cpp do not."
)


class TorchOffer(FitsWidth, QWidget):
    """The row's text and button; ``note_choice(backend, dtype)`` follows the form's choices;
    ``installed(now)`` once pip has installed PyTorch (``now``: usable without a restart)."""

    installed = Signal(bool)

    def __init__(self) -> None:
        super().__init__(objectName="torchOfferRow")
        self.missing = not optional_torch.torch_available()
        self.size_words = optional_torch.install_plan().size_words if self.missing else ""
        self.label = FittedLabel(objectName="torchOffer", wordWrap=True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.button = QPushButton("Install PyTorch…", objectName="installTorchOfferButton")
        self.button.clicked.connect(self.open_dialog)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignTop)
        self._torch_backend, self._dtype = False, ""  # what the form chose that needs PyTorch
        self._done = ""  # how the install ended, once it has
        self._show()

    def note_choice(self, backend: str, dtype: str | None) -> None:
        """Say whether the chosen backend and precision need PyTorch, which is not here."""
        self._torch_backend = backend == "torch"
        self._dtype = dtype if dtype not in ("auto", None) else ""
        self._show()

    def open_dialog(self) -> None:
        dialog = offer_install(self.window(), "The torch backend" if self._torch_backend else "")
        dialog.installed.connect(self._installed)

    def _installed(self, now: bool) -> None:
        self._done = (
            "PyTorch installed, ready without a restart." if now else "PyTorch installed. Restart Draftscope to use it."
        )
        self._show()
        self.installed.emit(now)

    def _show(self) -> None:
        if self._done:
            text = self._done
        elif self._torch_backend:
            text = (
                "The torch backend needs PyTorch, which is not installed here: install it, or choose Auto or llama.cpp."
            )
        elif self._dtype:
            text = (
                f"Precision {self._dtype} applies to the torch backend, which needs PyTorch (not installed here); "
                "GGUF models on llama.cpp compute with the file's own weights."
            )
        else:
            text = f"Not installed. {NEEDS}"
        self.label.setText(text if self._done else f"{text} Download: {self.size_words}.")
        show_error(self.label, self._torch_backend and not self._done)
        self.button.setVisible(not self._done)
