"""The first-run dialog's offer of a draft model: under the catalogue, for a chosen model that a
smaller catalogue model can draft for (Qwen2.5-Coder-1.5B: the 0.5B), a checkbox to download it
too, with what a draft model is, that it is optional, its download size and what it gives.

``DraftOffer.show_for(model)`` follows the chosen model; ``wanted()`` is the draft model to
download with it (None: not offered or not ticked); ``apply(settings)`` turns the "model" drafter
on with that draft model once it is on disk."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QButtonGroup, QCheckBox, QVBoxLayout, QWidget

from draftscope.core.words import memory_text, size_text
from draftscope.gui.form_widgets import indented, note
from draftscope.models import catalog
from draftscope.storage.settings import Settings


class DraftOffer(QWidget):
    """A checkbox (``downloadDraftCheck``) and its note (``draftOfferNote``); hidden when the chosen
    model has no catalogue draft model."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, objectName="draftOffer")
        self.draft: catalog.CatalogModel | None = None  # the draft model offered for the chosen model
        self.check = QCheckBox(objectName="downloadDraftCheck")
        self.note = note("")
        self.note.setObjectName("draftOfferNote")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 0, 0, 0)
        layout.addWidget(self.check)
        layout.addWidget(indented(self.note))
        self.hide()

    def follow(
        self, choice: QButtonGroup, chosen: Callable[[], catalog.CatalogModel | None], dtype: str, backend: str
    ) -> None:
        """Offer the draft model of whichever model ``choice`` has checked (``chosen()`` names it)."""
        choice.buttonToggled.connect(lambda *_: self.show_for(chosen(), dtype, backend))

    def show_for(self, target: catalog.CatalogModel | None, dtype: str, backend: str) -> None:
        """Offer the smallest catalogue model that can draft for ``target`` (nothing for None)."""
        drafts = catalog.draft_models_for(target) if target is not None else []
        self.draft = min(drafts, key=lambda m: m.parameters) if drafts else None
        self.setVisible(self.draft is not None)
        if self.draft is None:
            return
        d = self.draft
        state = "already downloaded" if d.fetched else f"a {size_text(d.size)} download"
        self.check.setText(f"Also get {d.title} as its draft model (optional; {state})")
        self.note.setText(
            f"A draft model is a smaller model with the same tokenizer: it guesses the next few tokens and "
            f"{target.title} checks them all in one step, so answers come faster where the guesses hold, with the "
            f"same text. It needs about {memory_text(d.memory_needed(dtype, backend))} more memory. Without it, "
            "drafts come from the datastore and the conversation; you can add it later in Settings ▸ Model."
        )

    def wanted(self) -> catalog.CatalogModel | None:
        return self.draft if self.draft is not None and self.check.isChecked() else None

    def apply(self, settings: Settings) -> None:
        """Draft with the offered model when it was wanted and is on disk; else drop a catalogue draft model."""
        draft = self.wanted()
        if draft is not None and draft.fetched:
            settings.draft_model, on = draft.name, True
        elif catalog.find(settings.draft_model) is not None:  # one this offer set before Back: not wanted now
            settings.draft_model, on = "", False
        else:
            return
        settings.drafters = {**settings.drafters, "model": on}
