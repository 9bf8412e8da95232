"""Opening the recurrent drafter's training from the window (File ▸ Train the recurrent drafter…).
Apart from the dialog (train_head.py, which imports torch) because the window runs where PyTorch may
be missing: training needs it, so the window offers to install it first (gui/dialogs/torch_install.py)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from draftscope import optional_torch
from draftscope.gui.dialogs.torch_install import offer_install

TRAINING = "Training the recurrent drafter"


def open_for_window(window, options_overrides: dict | None = None) -> None:
    """Train a recurrent head for ``window``'s loaded model (window-modal: the model trains or
    answers, never both); once written, it drafts from the next answer on (window.use_trained_head).
    Without PyTorch the window offers to install it, and the training opens once it is usable."""
    if window.streaming:
        window.status.say("The recurrent drafter can be trained once the answer is done")
        return
    backend = window.engine.backend
    if not backend.gives_hidden:  # say so rather than fail inside the dialog
        QMessageBox.information(
            window,
            "Train the recurrent drafter",
            f"The recurrent drafter trains on and reads the model's hidden state: the "
            f"{backend.kind} backend {backend.no_hidden_reason}.",
        )
        return
    if not optional_torch.torch_available():
        offer_install(window, TRAINING, on_ready=lambda: open_for_window(window, options_overrides))
        return
    from draftscope.gui.dialogs.train_head import TrainHeadDialog  # noqa: PLC0415  # torch

    window.train_dialog = TrainHeadDialog(
        window.engine, window.settings.model, options_overrides=options_overrides, parent=window
    )
    window.train_dialog.setWindowModality(Qt.WindowModality.WindowModal)
    window.train_dialog.head_trained.connect(window.use_trained_head)
    window.train_dialog.open()
