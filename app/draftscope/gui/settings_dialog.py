"""The settings dialog: edits a copy of the Settings in four tabs and refuses OK, with an inline
message, while a field is invalid (out of range, a model path or datastore that does not exist,
a file that is not a Draftscope index)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
    QLineEdit, QPlainTextEdit, QPushButton, QSpinBox, QTabWidget, QVBoxLayout, QWidget,
)

from draftscope.datastore.default import default_datastore_path
from draftscope.engine.models import DEFAULT_MODEL, resolve_model
from draftscope.retrieval import Reader
from draftscope.storage.settings import Settings

# Changing one of these means loading a model again; every other field applies to the next answer.
RELOAD_FIELDS = frozenset({"model", "device", "draft_model"})

_THEMES = (("System", "system"), ("Light", "light"), ("Dark", "dark"))


def changed_fields(old: Settings, new: Settings) -> set[str]:
    """Names of the fields whose values differ; intersect with RELOAD_FIELDS to decide on a reload."""
    return {f.name for f in fields(Settings) if getattr(old, f.name) != getattr(new, f.name)}


def available_devices() -> list[str]:
    """Devices torch can use here, besides "auto"."""
    import torch  # already loaded by the engine in the app; imported late to keep this module light

    devices = ["cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        devices += ["cuda"] + ([f"cuda:{i}" for i in range(count)] if count > 1 else [])
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def _hint(text: str) -> QLabel:
    label = QLabel(text)
    label.setEnabled(False)  # the disabled palette greys it, in every theme
    return label


def _form(tab: QWidget) -> QFormLayout:
    form = QFormLayout(tab)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return form


def _row(*widgets, stretch_first: bool = True) -> QWidget:
    box = QWidget()
    layout = QHBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    for i, w in enumerate(widgets):
        layout.addWidget(w, 1 if (i == 0 and stretch_first) else 0)
    if not stretch_first:
        layout.addStretch(1)
    return box


def _double_spin(name: str, low: float, high: float, step: float) -> QDoubleSpinBox:
    spin = QDoubleSpinBox(objectName=name)
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setDecimals(2)
    spin.setMinimumWidth(110)
    return spin


def _int_spin(name: str, low: int, high: int) -> QSpinBox:
    spin = QSpinBox(objectName=name)
    spin.setRange(low, high)
    spin.setMinimumWidth(110)
    return spin


class SettingsDialog(QDialog):
    """``SettingsDialog(settings)``; after ``exec()`` returns Accepted, ``result_settings()`` is the
    edited copy. ``devices`` overrides the detected device list (tests)."""

    def __init__(self, settings: Settings, parent: QWidget | None = None, *,
                 devices: Sequence[str] | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self._original = copy.deepcopy(settings)
        self._devices = list(devices) if devices is not None else available_devices()

        self.tabs = QTabWidget(objectName="settingsTabs")
        self.tabs.addTab(self._model_tab(), "Model")
        self.tabs.addTab(self._drafting_tab(), "Drafting")
        self.tabs.addTab(self._generation_tab(), "Generation")
        self.tabs.addTab(self._appearance_tab(), "Appearance")
        self._align_label_columns()

        self.error_label = QLabel(objectName="settingsError")
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setStyleSheet("color: #c62828;")
        self.error_label.hide()

        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setObjectName("okButton")
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setObjectName("cancelButton")
        restore = self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        restore.setObjectName("restoreDefaultsButton")
        restore.clicked.connect(lambda: self._show(Settings()))
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.error_label)
        layout.addWidget(self.buttons)
        self.resize(max(640, self.sizeHint().width()), self.sizeHint().height())
        self._show(self._original)

    # --- tabs -------------------------------------------------------------------------------

    def _model_tab(self) -> QWidget:
        tab = QWidget()
        form = _form(tab)
        self.model_edit = QLineEdit(objectName="modelEdit")
        self.model_edit.setPlaceholderText("default, a model folder, a .gguf file or a hub id (org/name)")
        folder = QPushButton("Folder…", objectName="browseModelFolderButton")
        folder.setToolTip("Choose a Hugging Face model folder")
        folder.clicked.connect(self._browse_model_folder)
        gguf = QPushButton("GGUF…", objectName="browseModelGgufButton")
        gguf.setToolTip("Choose a single .gguf model file")
        gguf.clicked.connect(self._browse_model_gguf)
        default = QPushButton("Default", objectName="defaultModelButton")
        default.setToolTip("The bundled SmolLM2-135M-Instruct")
        default.clicked.connect(lambda: self.model_edit.setText(DEFAULT_MODEL))
        form.addRow("Model:", _row(self.model_edit, folder, gguf, default))
        form.addRow("", _hint("A hub id (org/name) is downloaded on first use."))

        self.device_combo = QComboBox(objectName="deviceCombo")
        self.device_combo.setMinimumWidth(180)
        form.addRow("Device:", _row(self.device_combo, stretch_first=False))

        self.draft_model_edit = QLineEdit(objectName="draftModelEdit")
        self.draft_model_edit.setPlaceholderText("none (optional): a smaller model with the same tokenizer")
        self.draft_model_edit.textChanged.connect(self._update_model_drafter)
        form.addRow("Draft model:", self.draft_model_edit)
        form.addRow("", _hint("Changing the model, device or draft model reloads the model."))
        return tab

    def _drafting_tab(self) -> QWidget:
        tab = QWidget()
        form = _form(tab)
        self.datastore_edit = QLineEdit(objectName="datastoreEdit")
        default = default_datastore_path()
        state = "exists" if default.is_file() else "not built yet"
        # The state first: a long path is clipped at the end, the tooltip has it whole.
        self.datastore_edit.setPlaceholderText(f"default ({state}): {default}")
        self.datastore_edit.setToolTip(f"Empty uses the default chat datastore:\n{default} ({state})")
        browse = QPushButton("Browse…", objectName="browseDatastoreButton")
        browse.setToolTip("Choose a Draftscope index (.idx)")
        browse.clicked.connect(self._browse_datastore)
        form.addRow("Datastore:", _row(self.datastore_edit, browse))
        hint = _hint("")
        # A deep home folder must not widen the dialog: elide the middle of the path.
        shown = hint.fontMetrics().elidedText(str(default), Qt.TextElideMode.ElideMiddle, 460)
        missing = "" if default.is_file() else "\nNot built yet: draftscope datastore build-default builds it."
        hint.setText(f"Empty uses the default chat datastore:\n{shown}{missing}")
        hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", hint)

        self.drafter_retrieval = QCheckBox("Retrieval (suffix search in the datastore)", objectName="drafterRetrieval")
        self.drafter_context = QCheckBox("Context (repeats from this conversation)", objectName="drafterContext")
        self.drafter_model = QCheckBox("Draft model", objectName="drafterModel")
        drafters = QWidget()
        column = QVBoxLayout(drafters)
        column.setContentsMargins(0, 0, 0, 0)
        for box in (self.drafter_retrieval, self.drafter_context, self.drafter_model):
            column.addWidget(box)
        form.addRow("Drafters:", drafters)
        return tab

    def _generation_tab(self) -> QWidget:
        tab = QWidget()
        form = _form(tab)
        self.temperature_spin = _double_spin("temperatureSpin", 0.0, 5.0, 0.05)
        form.addRow("Temperature:", _row(self.temperature_spin, _hint("0 = greedy: always the most likely token"),
                                         stretch_first=False))
        self.top_p_spin = _double_spin("topPSpin", 0.01, 1.0, 0.05)
        form.addRow("Top-p:", _row(self.top_p_spin, _hint("1 = off"), stretch_first=False))
        self.top_k_spin = _int_spin("topKSpin", 0, 100_000)
        self.top_k_spin.setSpecialValueText("off")
        form.addRow("Top-k:", _row(self.top_k_spin, _hint("0 = off"), stretch_first=False))
        self.max_new_tokens_spin = _int_spin("maxNewTokensSpin", 1, 1_000_000)
        self.max_new_tokens_spin.setSingleStep(64)
        form.addRow("Max new tokens:", _row(self.max_new_tokens_spin, stretch_first=False))
        self.repetition_penalty_spin = _double_spin("repetitionPenaltySpin", 0.01, 10.0, 0.05)
        form.addRow("Repetition penalty:", _row(self.repetition_penalty_spin, _hint("1 = off"), stretch_first=False))
        self.system_prompt_edit = QPlainTextEdit(objectName="systemPromptEdit")
        self.system_prompt_edit.setPlaceholderText("none: the model's own default")
        self.system_prompt_edit.setMinimumHeight(100)
        form.addRow("System prompt:", self.system_prompt_edit)
        return tab

    def _appearance_tab(self) -> QWidget:
        tab = QWidget()
        form = _form(tab)
        self.theme_combo = QComboBox(objectName="themeCombo")
        for text, value in _THEMES:
            self.theme_combo.addItem(text, value)
        self.theme_combo.setMinimumWidth(180)
        form.addRow("Theme:", _row(self.theme_combo, stretch_first=False))
        self.font_size_spin = _int_spin("fontSizeSpin", 6, 48)
        self.font_size_spin.setSuffix(" pt")
        form.addRow("Font size:", _row(self.font_size_spin, stretch_first=False))
        return tab

    def _align_label_columns(self) -> None:
        # One label width for all tabs, so the fields do not jump when switching tabs.
        labels = []
        for i in range(self.tabs.count()):
            form = self.tabs.widget(i).layout()
            for row in range(form.rowCount()):
                item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                if item is not None and item.widget() is not None:
                    labels.append(item.widget())
        width = max(label.sizeHint().width() for label in labels)
        for label in labels:
            label.setMinimumWidth(width)
            label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    # --- settings <-> widgets ---------------------------------------------------------------

    def _show(self, s: Settings) -> None:
        self.model_edit.setText(s.model)
        self._fill_devices(s.device)
        self.draft_model_edit.setText(s.draft_model)
        self.datastore_edit.setText(s.datastore)
        self.drafter_retrieval.setChecked(s.drafters.get("retrieval", False))
        self.drafter_context.setChecked(s.drafters.get("context", False))
        self.drafter_model.setChecked(s.drafters.get("model", False))
        self.temperature_spin.setValue(s.temperature)
        self.top_p_spin.setValue(s.top_p)
        self.top_k_spin.setValue(s.top_k)
        self.max_new_tokens_spin.setValue(s.max_new_tokens)
        self.repetition_penalty_spin.setValue(s.repetition_penalty)
        self.system_prompt_edit.setPlainText(s.system_prompt)
        self.theme_combo.setCurrentIndex(max(0, self.theme_combo.findData(s.theme)))
        self.font_size_spin.setValue(s.font_size)
        self._update_model_drafter()
        self.error_label.hide()

    def _fill_devices(self, current: str) -> None:
        self.device_combo.clear()
        for device in ["auto", *self._devices]:
            self.device_combo.addItem(device, device)
        # A device stored on another machine (or a GPU gone missing) is kept, not silently replaced.
        if self.device_combo.findData(current) < 0:
            self.device_combo.addItem(f"{current} (not available)", current)
        self.device_combo.setCurrentIndex(self.device_combo.findData(current))

    def _update_model_drafter(self) -> None:
        has_draft_model = bool(self.draft_model_edit.text().strip())
        self.drafter_model.setEnabled(has_draft_model)
        why = "Set a draft model on the Model tab to use this drafter"
        self.drafter_model.setToolTip("" if has_draft_model else why)

    def _float(self, spin: QDoubleSpinBox, original: float) -> float:
        # The spin box rounds to its decimals; an untouched field keeps its exact stored value.
        return original if round(original, spin.decimals()) == spin.value() else spin.value()

    def result_settings(self) -> Settings:
        """A new Settings holding what the form shows."""
        o = self._original
        return Settings(
            model=self.model_edit.text().strip(),
            datastore=self.datastore_edit.text().strip(),
            drafters={**o.drafters, "retrieval": self.drafter_retrieval.isChecked(),
                      "context": self.drafter_context.isChecked(), "model": self.drafter_model.isChecked()},
            draft_model=self.draft_model_edit.text().strip(),
            temperature=self._float(self.temperature_spin, o.temperature),
            top_p=self._float(self.top_p_spin, o.top_p),
            top_k=self.top_k_spin.value(),
            max_new_tokens=self.max_new_tokens_spin.value(),
            repetition_penalty=self._float(self.repetition_penalty_spin, o.repetition_penalty),
            system_prompt=self.system_prompt_edit.toPlainText(),
            device=self.device_combo.currentData(),
            theme=self.theme_combo.currentData(),
            font_size=self.font_size_spin.value(),
        )

    # --- validation -------------------------------------------------------------------------

    def problems(self) -> list[tuple[str, QWidget]]:
        """(message, widget to focus) for every invalid field of the form."""
        s = self.result_settings()
        widgets = {"temperature": self.temperature_spin, "top_p": self.top_p_spin, "top_k": self.top_k_spin,
                   "max_new_tokens": self.max_new_tokens_spin, "repetition_penalty": self.repetition_penalty_spin,
                   "theme": self.theme_combo, "font_size": self.font_size_spin}
        out = [(p, widgets[p.split()[0]]) for p in s.problems()]
        if not s.model:
            out.append(("Model: enter a model, or press Default", self.model_edit))
        models = (("Model", s.model, self.model_edit), ("Draft model", s.draft_model, self.draft_model_edit))
        for label, spec, edit in models:
            if spec:
                try:
                    # Hub ids pass as typed; anything path-like must exist and hold a model.
                    resolve_model(spec, fetch_default=False)
                except (OSError, ValueError) as exc:
                    out.append((f"{label}: {exc}", edit))
        if s.datastore:
            path = Path(s.datastore).expanduser()
            if not path.exists():
                out.append((f"Datastore: {path} does not exist", self.datastore_edit))
            else:
                try:
                    Reader(path)
                except Exception as exc:  # the index reader raises ValueError and OSError kinds
                    out.append((f"Datastore: {exc}", self.datastore_edit))
        return out

    def accept(self) -> None:
        problems = self.problems()
        if not problems:
            self.error_label.hide()
            super().accept()
            return
        self.error_label.setText("\n".join(message for message, _ in problems))
        self.error_label.show()
        widget = problems[0][1]
        for i in range(self.tabs.count()):
            if self.tabs.widget(i).isAncestorOf(widget):
                self.tabs.setCurrentIndex(i)
        widget.setFocus()

    # --- file pickers -----------------------------------------------------------------------

    def _start_folder(self, text: str) -> str:
        path = Path(text).expanduser()
        return str(path if path.is_dir() else path.parent) if text and text != DEFAULT_MODEL else str(Path.home())

    def _browse_model_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder", self._start_folder(self.model_edit.text()))
        if folder:
            self.model_edit.setText(folder)

    def _browse_model_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model", self._start_folder(self.model_edit.text()),
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.model_edit.setText(path)

    def _browse_datastore(self) -> None:
        start = self.datastore_edit.text() or str(default_datastore_path().parent)
        path, _ = QFileDialog.getOpenFileName(self, "Datastore", self._start_folder(start),
                                              "Draftscope index (*.idx);;All files (*)")
        if path:
            self.datastore_edit.setText(path)
