"""The settings dialog's Model tab, as a mixin of ``SettingsDialog``: the widgets that choose the
model and the draft model (the catalogue combos, the Other rows with their Folder… and GGUF…
pickers), the download boxes that fetch a catalogue model with progress and cancel, one at a time.
Split from ``settings_dialog`` so that module keeps what the dialog does with them (settings <->
widgets, the precision, the draft models offered, validation); where the model runs (device,
precision, backend, GPU layers, workers, context length) is built there too, beside ``BACKEND_CHOICES``."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFileDialog, QLineEdit, QPushButton, QSizePolicy, QWidget

from draftscope.core.settings_checks import OTHER, browse_start
from draftscope.core.words import size_text
from draftscope.gui.dialogs.model_download import DownloadBox
from draftscope.gui.dialogs.torch_offer import TorchOffer
from draftscope.gui.form_widgets import form_layout, hint, row
from draftscope.models import catalog
from draftscope.models.local import find_local_models

OTHER_TEXT = "Other: folder, .gguf file or hub id"


class ModelTabParts:
    """The Model tab's widgets and downloads, mixed into ``SettingsDialog`` (a QDialog): it calls
    back the dialog's reactions (``_on_model_changed``, ``_typed``, ``_update_model_state``...)."""

    def _model_tab(self) -> QWidget:
        tab = QWidget()
        form = form_layout(tab)
        self.model_combo = QComboBox(objectName="modelCombo")
        for model in catalog.CATALOG:
            self.model_combo.addItem(model.title, model.name)
        # GGUF models LM Studio and Ollama already keep on this computer: their file is the setting
        for local in find_local_models():
            self.model_combo.addItem(
                f"{local.name} · {local.app} · {size_text(local.size)} · on this computer", str(local.path)
            )
            self.model_combo.setItemData(self.model_combo.count() - 1, str(local.path), Qt.ItemDataRole.ToolTipRole)
        self.model_combo.addItem(OTHER_TEXT, OTHER)
        self.model_combo.currentIndexChanged.connect(self._on_model_changed)
        form.addRow("Model:", self.model_combo)
        self.model_edit = QLineEdit(objectName="modelEdit")
        self.model_edit.setPlaceholderText("a model folder, a .gguf file or a hub id (org/name)")
        self.model_edit.textChanged.connect(lambda text: self._typed(self.model_combo, text))
        self.model_edit.editingFinished.connect(lambda: self.drafting.update_default_datastore())
        self.model_other_row = self._other_row(self.model_edit, "Model", "model")
        form.addRow("", self.model_other_row)
        self.model_box = self._download_box("model")
        form.addRow("", self.model_box)

        self._running_rows(form)

        self.draft_model_combo = QComboBox(objectName="draftModelCombo")
        self.draft_model_combo.currentIndexChanged.connect(self._on_draft_changed)
        form.addRow("Draft model:", self.draft_model_combo)
        self.draft_model_edit = QLineEdit(objectName="draftModelEdit")
        self.draft_model_edit.setPlaceholderText(
            "a smaller model with the same tokenizer: folder, .gguf file or hub id"
        )
        self.draft_model_edit.textChanged.connect(lambda text: self._typed(self.draft_model_combo, text))
        self.draft_model_edit.textChanged.connect(self._update_model_drafter)
        self.draft_other_row = self._other_row(self.draft_model_edit, "Draft model", "draftModel")
        form.addRow("", self.draft_other_row)
        self.draft_box = self._download_box("draftModel")
        form.addRow("", self.draft_box)
        self.draft_hint = hint("", wrap=True, objectName="draftModelHint")
        form.addRow("", self.draft_hint)
        form.addRow(
            "",
            hint(
                "Changing the model, device, precision, backend, GPU layers, workers, context length or draft model "
                "reloads the model.",
                wrap=True,
            ),
        )
        filler = QWidget()  # spare height goes below the last row, not between wrapped hints
        filler.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        form.addRow(filler)
        self._model_form = form
        return tab

    def _other_row(self, edit: QLineEdit, what: str, prefix: str) -> QWidget:
        """The line edit for a model outside the catalogue, with Folder… and GGUF… pickers."""
        upper = prefix[:1].upper() + prefix[1:]
        folder = QPushButton("Folder…", objectName=f"browse{upper}FolderButton")
        folder.setToolTip("Choose a Hugging Face model folder")
        folder.clicked.connect(lambda: self._browse_folder(edit, f"{what} folder"))
        gguf = QPushButton("GGUF…", objectName=f"browse{upper}GgufButton")
        gguf.setToolTip("Choose a single .gguf model file")
        gguf.clicked.connect(lambda: self._browse_gguf(edit, f"GGUF {what.lower()}"))
        return row(edit, folder, gguf)

    def _download_box(self, prefix: str) -> DownloadBox:
        box = DownloadBox(prefix, self._fetch_model)
        box.download_button.clicked.connect(lambda: self._start_download(box))
        box.download.ended.connect(lambda outcome: self._download_ended(box, outcome))
        return box

    # --- PyTorch, where it is not installed ---------------------------------------------------

    def _torch_row(self, form) -> None:
        """While PyTorch is missing: what needs it, its size and Install PyTorch…; the backend and
        precision chosen say when they need it."""
        self.torch_offer = TorchOffer()
        form.addRow("PyTorch:", self.torch_offer)
        form.setRowVisible(self.torch_offer, self.torch_offer.missing)
        for combo in (self.backend_combo, self.dtype_combo):
            combo.currentIndexChanged.connect(
                lambda _i: self.torch_offer.note_choice(
                    self.backend_combo.currentData(), self.dtype_combo.currentData()
                )
            )
        self.torch_offer.installed.connect(self._torch_installed)

    def _torch_installed(self, now: bool) -> None:
        if now:  # what Auto picks can be told now
            self._precisions.clear()
            self._on_precision_changed()

    # --- downloading a catalogue model: one at a time -------------------------------------------

    def _downloading(self) -> bool:
        return self.model_box.download.running or self.draft_box.download.running

    def _start_download(self, box: DownloadBox) -> None:
        offered = box is self.draft_box and self.chosen_draft_model() is None
        if box.model is None or self._downloading() or not box.download.start(box.model):
            return
        if offered:  # the offered draft model: downloading it is choosing it, and drafting with it
            self.draft_model_combo.setCurrentIndex(self.draft_model_combo.findData(box.model.name))
            self.drafting.model.setChecked(True)
        self.error_label.hide()
        self._update_model_state()

    def _download_ended(self, box: DownloadBox, outcome: str) -> None:
        if outcome == "failed":
            box.download.show_status(
                f"The model could not be downloaded. {box.download.why_failed()} Press Download to retry.", error=True
            )
        self._refresh_items()
        self._update_model_state()

    # --- file pickers -----------------------------------------------------------------------

    def _browse_folder(self, edit: QLineEdit, title: str) -> None:
        folder = QFileDialog.getExistingDirectory(self, title, browse_start(edit.text()))
        if folder:
            edit.setText(folder)

    def _browse_gguf(self, edit: QLineEdit, title: str) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, title, browse_start(edit.text()), "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            edit.setText(path)
