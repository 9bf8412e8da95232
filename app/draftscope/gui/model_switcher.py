"""The model switcher at the top of the chat, as LM Studio, Jan and GPT4All have one: the model in
use, the catalogue's models on this computer, the GGUF models LM Studio and Ollama keep, and the
models used recently; another model is loaded (the launcher reloads, the window comes back on the
same conversation); "Other model…" opens Settings ▸ Model (a folder, a file, a download). The list
is made again when a download ends (``model_arrivals``) and each time it is opened, so a model
LM Studio or Ollama fetched meanwhile is offered without a restart."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QComboBox

from draftscope.core.words import setting_name
from draftscope.models import catalog
from draftscope.models.local import find_local_models

OTHER = "\0other"  # the item that opens Settings ▸ Model


def model_choices(current: str, recent: list[str]) -> list[tuple[str, str]]:
    """(shown text, setting) for each model the switcher offers, the current one first."""
    choices: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(text: str, spec: str) -> None:
        key = str(Path(spec).expanduser().resolve()) if Path(spec).expanduser().exists() else spec
        if key not in seen:
            seen.add(key)
            choices.append((text, spec))

    def named(spec: str) -> str:
        model = catalog.find(spec)
        return model.title if model is not None else Path(spec).stem if spec.endswith(".gguf") else spec

    add(named(current), current)
    for model in catalog.CATALOG:
        if model.path.exists():
            add(model.title, setting_name(model))
    for local in find_local_models():
        add(f"{local.name} · {local.app}", str(local.path))
    for spec in recent:
        add(f"{named(spec)} · recent", spec)
    return choices


class ModelArrivals(QObject):
    """News of a model that arrived on this computer (a download ended): every switcher hears it."""

    arrived = Signal()


_arrivals: ModelArrivals | None = None


def model_arrivals() -> ModelArrivals:
    """The app's one ModelArrivals (made on first use, on the UI thread)."""
    global _arrivals
    if _arrivals is None:
        _arrivals = ModelArrivals()
    return _arrivals


class ModelSwitcher(QComboBox):
    chosen = Signal(str)  # a model's setting: load it
    other_requested = Signal()  # "Other model…": Settings ▸ Model

    def __init__(self, current: str, recent: list[str] | None = None) -> None:
        super().__init__(objectName="modelSwitcher")
        self.setToolTip("The model answering; choose another to load it (this conversation stays)")
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.current, self.recent = current, list(recent or [])
        self.refresh()
        self.activated.connect(self._on_activated)
        model_arrivals().arrived.connect(self.refresh)

    def refresh(self) -> None:
        """Offer the models on this computer now (the model in use first, then "Other model…")."""
        self.blockSignals(True)
        self.clear()
        for text, spec in model_choices(self.current, self.recent):
            self.addItem(text, spec)
        self.addItem("Other model…", OTHER)
        self.setCurrentIndex(0)
        self.blockSignals(False)

    def showPopup(self) -> None:
        self.refresh()  # LM Studio or Ollama may have fetched a model since the list was made
        super().showPopup()

    def _on_activated(self, index: int) -> None:
        spec = self.itemData(index)
        self.setCurrentIndex(0)  # the model in use stays shown until another is loaded
        if spec == OTHER:
            self.other_requested.emit()
        elif index != 0:
            self.chosen.emit(spec)
