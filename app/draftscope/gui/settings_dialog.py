"""The settings dialog: edits a copy of the Settings in four tabs and refuses OK, with an inline
message, while a field is invalid (out of range, a model path or datastore that does not exist,
a file that is not a Draftscope index, a newly chosen catalogue model not downloaded yet).

The Model tab offers the model catalogue (size, memory needed, downloaded or not; a download runs
here with progress and cancel), the precision (auto says what it picks here and why) and only the
draft models that share the chosen model's tokenizer, saying why the others are not offered."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QMetaObject, QSize, Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
    QLineEdit, QPlainTextEdit, QProgressBar, QPushButton, QSizePolicy, QSpinBox, QTabWidget, QVBoxLayout, QWidget,
)

from draftscope import assets, catalog
from draftscope.datastore.default import default_datastore_path
from draftscope.engine.models import DEFAULT_MODEL, resolve_model
from draftscope.gui.jobs import POLL_INTERVAL_S, end_job_thread
from draftscope.gui.jobs import JobWorker as _JobWorker
from draftscope.gui.jobs import TransferRate
from draftscope.words import describe_error, memory_text, part_status, run_precision, setting_name, size_text
from draftscope.words import sentence as _sentence
from draftscope.gui.worker import WorkerThread
from draftscope.retrieval import Reader
from draftscope.local_models import find_local_models
from draftscope.storage.settings import DTYPES, Settings

BACKEND_CHOICES = (("auto", "Auto"), ("llama.cpp", "llama.cpp (GGUF files)"), ("torch", "torch (transformers)"))

# Changing one of these means loading a model again; every other field applies to the next answer.
SERVER_FIELDS = frozenset({"server_enabled", "server_port", "server_api_key", "server_keep_history"})

_THEMES = (("System", "system"), ("Light", "light"), ("Dark", "dark"))
_OTHER = "\x00other"  # the combo entry that reveals a line edit for a folder, a .gguf file or a hub id
_OTHER_TEXT = "Other: folder, .gguf file or hub id"


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


class _FitsWidth:
    """Asks for the height its wrapped text takes at its actual width. QFormLayout gives a row the
    height of its size hint, which Qt works out for a narrower guess at the width: a wrapped text
    would float in a gap a line or two too tall."""

    def _fitted(self, hint: QSize) -> QSize:
        if self.width() > 1 and self.hasHeightForWidth():
            height = self.heightForWidth(self.width())
            if height > 0:
                return QSize(hint.width(), height)
        return hint

    def sizeHint(self) -> QSize:
        return self._fitted(super().sizeHint())

    def minimumSizeHint(self) -> QSize:
        return self._fitted(super().minimumSizeHint())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()


class _WrappingLabel(_FitsWidth, QLabel):
    pass


def _hint(text: str, *, wrap: bool = False, objectName: str = "") -> QLabel:
    label = _WrappingLabel(text, objectName=objectName)
    label.setEnabled(False)  # the disabled palette greys it, in every theme
    label.setWordWrap(wrap)
    return label


def catalog_entry(spec: str) -> catalog.CatalogModel | None:
    """The catalogue model a settings value names (as ``resolve_model`` reads it: a path that
    exists is a path), else None."""
    spec = spec.strip()
    if not spec or Path(spec).expanduser().exists():
        return None
    return catalog.find(spec)


class _DownloadBox(_FitsWidth, QWidget):
    """Under a model choice: what the chosen catalogue model is good for and whether it is on disk,
    a Download button, and while it downloads a progress bar, Cancel and the bytes, rate and time
    left. ``prefix`` names the widgets (``modelState``, ``downloadModelButton``, ...)."""

    def __init__(self, prefix: str, upper: str) -> None:
        super().__init__(objectName=f"{prefix}Download")
        self.state = _hint("", wrap=True, objectName=f"{prefix}State")
        self.download_button = QPushButton("Download", objectName=f"download{upper}Button")
        self.progress = QProgressBar(objectName=f"{prefix}FetchProgress")
        self.cancel_button = QPushButton("Cancel", objectName=f"cancel{upper}FetchButton")
        self.status = _WrappingLabel(objectName=f"{prefix}FetchStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.model: catalog.CatalogModel | None = None
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.state, 1)
        top.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignTop)
        self.bar_row = QWidget()
        bar = QHBoxLayout(self.bar_row)
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.progress, 1)
        bar.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.bar_row)
        layout.addWidget(self.status)
        self.bar_row.hide()
        self.status.hide()

    def show_model(self, model: catalog.CatalogModel | None, *, other: str = "", busy: bool = False) -> None:
        """Describe ``model`` (None: ``other`` as the text, no download)."""
        if model is not self.model:
            self.status.clear()
            self.status.hide()
        self.model = model
        if model is None:
            self.state.setText(other)
            self.state.setVisible(bool(other))
            self.download_button.hide()
            return
        self.state.show()
        what = _sentence(model.good_for)
        if model.fetched:
            self.state.setText(f"{what} Downloaded.")
            self.download_button.hide()
        else:
            self.state.setText(f"{what}\nNot downloaded yet ({size_text(model.size)}).")
            self.download_button.show()
            self.download_button.setEnabled(not busy)

    def show_status(self, text: str, *, error: bool = False) -> None:
        self.status.setStyleSheet("color: #c62828;" if error else "")
        self.status.setText(text)
        self.status.setVisible(bool(text))


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
    edited copy. ``devices`` overrides the detected device list, ``fetch_model`` the catalogue
    download (tests)."""

    def __init__(self, settings: Settings, parent: QWidget | None = None, *,
                 devices: Sequence[str] | None = None, fetch_model=catalog.fetch_model, learned: str = "",
                 recurrent: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self._original = copy.deepcopy(settings)
        self._learned = learned  # what the model has learned from its answers, in words
        self._recurrent = recurrent  # the model's recurrent head in words ("" when it has none)
        self._devices = list(devices) if devices is not None else available_devices()
        self._fetch_model = fetch_model
        self._precisions: dict[str, object] = {}  # device -> what auto picks there (run_precision)
        self._filling = False  # widgets being set from settings: no reactions
        self._draft_note = ""  # why a draft model was reset to None
        # a download: one at a time, on a worker thread polled by a timer (as in the first-run dialog)
        self._worker: _JobWorker | None = None
        self._thread: WorkerThread | None = None
        self._job_box: _DownloadBox | None = None
        self._job_cancel: threading.Event | None = None
        self._job_line = self._job_phase = ""
        self._rate = TransferRate()
        self._closed = False
        self._poll = QTimer(self, interval=int(POLL_INTERVAL_S * 1000))
        self._poll.timeout.connect(self._poll_job)

        self.tabs = QTabWidget(objectName="settingsTabs")
        self.tabs.addTab(self._model_tab(), "Model")
        self.tabs.addTab(self._drafting_tab(), "Drafting")
        self.tabs.addTab(self._generation_tab(), "Generation")
        self.tabs.addTab(self._appearance_tab(), "Appearance")
        self.tabs.addTab(self._server_tab(), "Server")
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
        self._show(self._original)
        self.resize(max(640, self.sizeHint().width()), self.sizeHint().height())

    # --- tabs -------------------------------------------------------------------------------

    def _model_tab(self) -> QWidget:
        tab = QWidget()
        form = _form(tab)
        self.model_combo = QComboBox(objectName="modelCombo")
        for model in catalog.CATALOG:
            self.model_combo.addItem(model.title, model.name)
        # GGUF models LM Studio and Ollama already keep on this computer: their file is the setting
        for local in find_local_models():
            self.model_combo.addItem(f"{local.name} · {local.app} · {size_text(local.size)} · on this computer",
                                     str(local.path))
            self.model_combo.setItemData(self.model_combo.count() - 1, str(local.path), Qt.ItemDataRole.ToolTipRole)
        self.model_combo.addItem(_OTHER_TEXT, _OTHER)
        self.model_combo.currentIndexChanged.connect(self._on_model_changed)
        form.addRow("Model:", self.model_combo)
        self.model_edit = QLineEdit(objectName="modelEdit")
        self.model_edit.setPlaceholderText("a model folder, a .gguf file or a hub id (org/name)")
        self.model_edit.textChanged.connect(lambda text: self._typed(self.model_combo, text))
        self.model_edit.editingFinished.connect(self._update_datastore_hint)
        folder = QPushButton("Folder…", objectName="browseModelFolderButton")
        folder.setToolTip("Choose a Hugging Face model folder")
        folder.clicked.connect(lambda: self._browse_folder(self.model_edit, "Model folder"))
        gguf = QPushButton("GGUF…", objectName="browseModelGgufButton")
        gguf.setToolTip("Choose a single .gguf model file")
        gguf.clicked.connect(lambda: self._browse_gguf(self.model_edit, "GGUF model"))
        self.model_other_row = _row(self.model_edit, folder, gguf)
        form.addRow("", self.model_other_row)
        self.model_box = _DownloadBox("model", "Model")
        self.model_box.download_button.clicked.connect(lambda: self._start_download(self.model_box))
        self.model_box.cancel_button.clicked.connect(self._cancel_download)
        form.addRow("", self.model_box)

        self.device_combo = QComboBox(objectName="deviceCombo")
        self.device_combo.setMinimumWidth(180)
        self.device_combo.currentIndexChanged.connect(self._on_precision_changed)
        form.addRow("Device:", _row(self.device_combo, stretch_first=False))
        self.dtype_combo = QComboBox(objectName="dtypeCombo")
        for name in DTYPES:
            self.dtype_combo.addItem(name, name)
        self.dtype_combo.currentIndexChanged.connect(self._on_precision_changed)
        form.addRow("Precision:", _row(self.dtype_combo, stretch_first=False))
        form.addRow("", _hint("Auto: bfloat16 where the hardware computes it natively, else float32 (bfloat16 "
                              "halves the memory; emulated, it is many times slower).", wrap=True))
        self.backend_combo = QComboBox(objectName="backendCombo")
        for name, text in BACKEND_CHOICES:
            self.backend_combo.addItem(text, name)
        self.backend_combo.currentIndexChanged.connect(self._on_precision_changed)  # the memory estimates follow
        form.addRow("Backend:", _row(self.backend_combo, stretch_first=False))
        form.addRow("", _hint("Auto: llama.cpp for a GGUF model on the CPU: it computes with the file's own "
                              "quantised weights, in a fraction of the memory; torch for Hugging Face folders, "
                              "CUDA, and the recurrent drafter. Precision applies to torch.", wrap=True))

        self.draft_model_combo = QComboBox(objectName="draftModelCombo")
        self.draft_model_combo.currentIndexChanged.connect(self._on_draft_changed)
        form.addRow("Draft model:", self.draft_model_combo)
        self.draft_model_edit = QLineEdit(objectName="draftModelEdit")
        self.draft_model_edit.setPlaceholderText("a smaller model with the same tokenizer: folder, .gguf file or hub id")
        self.draft_model_edit.textChanged.connect(lambda text: self._typed(self.draft_model_combo, text))
        self.draft_model_edit.textChanged.connect(self._update_model_drafter)
        draft_folder = QPushButton("Folder…", objectName="browseDraftModelFolderButton")
        draft_folder.clicked.connect(lambda: self._browse_folder(self.draft_model_edit, "Draft model folder"))
        draft_gguf = QPushButton("GGUF…", objectName="browseDraftModelGgufButton")
        draft_gguf.clicked.connect(lambda: self._browse_gguf(self.draft_model_edit, "GGUF draft model"))
        self.draft_other_row = _row(self.draft_model_edit, draft_folder, draft_gguf)
        form.addRow("", self.draft_other_row)
        self.draft_box = _DownloadBox("draftModel", "DraftModel")
        self.draft_box.download_button.clicked.connect(lambda: self._start_download(self.draft_box))
        self.draft_box.cancel_button.clicked.connect(self._cancel_download)
        form.addRow("", self.draft_box)
        self.draft_hint = _hint("", wrap=True, objectName="draftModelHint")
        form.addRow("", self.draft_hint)
        form.addRow("", _hint("Changing the model, device, precision or draft model reloads the model.", wrap=True))
        filler = QWidget()  # spare height goes below the last row, not between wrapped hints
        filler.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        form.addRow(filler)
        self._model_form = form
        return tab

    def _drafting_tab(self) -> QWidget:
        tab = QWidget()
        form = _form(tab)
        self.datastore_edit = QLineEdit(objectName="datastoreEdit")
        browse = QPushButton("Browse…", objectName="browseDatastoreButton")
        browse.setToolTip("Choose a Draftscope index (.idx)")
        browse.clicked.connect(self._browse_datastore)
        form.addRow("Datastore:", _row(self.datastore_edit, browse))
        self.datastore_hint = _hint("", objectName="datastoreHint")
        self.datastore_hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", self.datastore_hint)
        self._update_datastore_hint()

        self.drafter_retrieval = QCheckBox("Retrieval (suffix search in the datastore)", objectName="drafterRetrieval")
        self.drafter_learned = QCheckBox("Learned (this model's own past answers; learns as you chat)",
                                         objectName="drafterLearned")
        self.drafter_learned.setToolTip("Each answer is added to a datastore of the model's own answers, indexed in "
                                        "the background; drafts that sound like the model get accepted more. "
                                        "Off: nothing is recorded and nothing drafted from it.")
        self.drafter_context = QCheckBox("Context (repeats from this conversation)", objectName="drafterContext")
        self.drafter_model = QCheckBox("Draft model", objectName="drafterModel")
        self.drafter_recurrent = QCheckBox("Recurrent (a head trained on this model's own predictions)",
                                           objectName="drafterRecurrent")
        self.drafter_recurrent.setEnabled(bool(self._recurrent))
        self.drafter_recurrent.setToolTip(
            "A small network drafts a few tokens ahead from the model's hidden state" if self._recurrent
            else "Train one: File ▸ Train the recurrent drafter…")
        drafters = QWidget()
        column = QVBoxLayout(drafters)
        column.setContentsMargins(0, 0, 0, 0)
        for box in (self.drafter_retrieval, self.drafter_learned):
            column.addWidget(box)
        if self._learned:
            column.addWidget(_hint(self._learned.removesuffix(" (off)") + " (File ▸ Forget the learned answers clears "
                                   "them)", objectName="learnedHint"))
        for box in (self.drafter_context, self.drafter_model, self.drafter_recurrent):
            column.addWidget(box)
        if self._recurrent:
            column.addWidget(_hint(f"The head: {self._recurrent}", objectName="recurrentHint"))
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
        self.seed_spin = _int_spin("seedSpin", -1, 2**31 - 1)
        self.seed_spin.setSpecialValueText("random")
        form.addRow("Seed:", _row(self.seed_spin, _hint("sampled answers: the same seed writes the same answer, with "
                                                        "or without drafts; each answer shows its seed; Regenerate "
                                                        "draws a new one"), stretch_first=False))
        self.system_prompt_edit = QPlainTextEdit(objectName="systemPromptEdit")
        self.system_prompt_edit.setPlaceholderText("none: the model's own default")
        self.system_prompt_edit.setMinimumHeight(100)
        form.addRow("System prompt:", self.system_prompt_edit)
        return tab

    def _server_tab(self) -> QWidget:
        tab = QWidget()
        form = _form(tab)
        self.server_enabled = QCheckBox("Run an OpenAI-compatible server on this machine", objectName="serverEnabled")
        form.addRow(self.server_enabled)
        self.server_port_spin = _int_spin("serverPortSpin", 1, 65535)
        self.server_url = _hint("")
        self.server_port_spin.valueChanged.connect(
            lambda port: self.server_url.setText(f"http://127.0.0.1:{port}/v1  (editors, scripts, the openai client)"))
        form.addRow("Port:", _row(self.server_port_spin, self.server_url, stretch_first=False))
        self.server_key_edit = QLineEdit(objectName="serverKeyEdit")
        self.server_key_edit.setPlaceholderText("none: any program on this machine may use it")
        self.server_key_edit.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        form.addRow("API key:", self.server_key_edit)
        self.server_history = QCheckBox("Keep served answers in the history (inspect their drafts in the panels)",
                                        objectName="serverKeepHistory")
        form.addRow(self.server_history)
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
        if self._job_box is not None:  # Restore defaults during a download: it goes on
            return
        self._filling = True
        try:
            self._draft_note = ""
            self._select_spec(self.model_combo, self.model_edit, s.model)
            self._fill_devices(s.device)
            self.dtype_combo.setCurrentIndex(max(0, self.dtype_combo.findData(s.dtype)))
            self.backend_combo.setCurrentIndex(max(0, self.backend_combo.findData(s.backend)))
            self._fill_drafts(s.draft_model)
        finally:
            self._filling = False
        self.datastore_edit.setText(s.datastore)
        self.drafter_retrieval.setChecked(s.drafters.get("retrieval", False))
        self.drafter_learned.setChecked(s.drafters.get("learned", True))
        self.drafter_context.setChecked(s.drafters.get("context", False))
        self.drafter_model.setChecked(s.drafters.get("model", False))
        self._drafters = dict(s.drafters)  # the base of result_settings' switches (Restore Defaults included)
        # without a head the box stays unticked (nothing drafts), and the stored switch is kept as it is
        self.drafter_recurrent.setChecked(bool(self._recurrent) and s.drafters.get("recurrent", True))
        self.temperature_spin.setValue(s.temperature)
        self.top_p_spin.setValue(s.top_p)
        self.top_k_spin.setValue(s.top_k)
        self.max_new_tokens_spin.setValue(s.max_new_tokens)
        self.repetition_penalty_spin.setValue(s.repetition_penalty)
        self.seed_spin.setValue(s.seed)
        self.system_prompt_edit.setPlainText(s.system_prompt)
        self.theme_combo.setCurrentIndex(max(0, self.theme_combo.findData(s.theme)))
        self.font_size_spin.setValue(s.font_size)
        self.server_enabled.setChecked(s.server_enabled)
        self.server_port_spin.setValue(s.server_port)
        self.server_url.setText(f"http://127.0.0.1:{s.server_port}/v1  (editors, scripts, the openai client)")
        self.server_key_edit.setText(s.server_api_key)
        self.server_history.setChecked(s.server_keep_history)
        self._on_precision_changed()
        self._update_model_state()
        self._update_datastore_hint()
        self.error_label.hide()

    def _select_spec(self, combo: QComboBox, edit: QLineEdit, spec: str) -> None:
        """Select the catalogue entry ``spec`` names, else Other with ``spec`` in the line edit."""
        entry = catalog_entry(spec)
        index = combo.findData(entry.name) if entry is not None else combo.findData(spec.strip()) if spec.strip() else -1
        if index >= 0:
            combo.setCurrentIndex(index)
            edit.clear()
        elif spec.strip():
            combo.setCurrentIndex(combo.findData(_OTHER))
            edit.setText(spec)
        else:  # nothing: the draft model's None; an empty Other for the model (refused on OK)
            none = combo.findData("")
            combo.setCurrentIndex(none if none >= 0 else combo.findData(_OTHER))
            edit.clear()

    def _fill_devices(self, current: str) -> None:
        self.device_combo.blockSignals(True)
        self.device_combo.clear()
        for device in ["auto", *self._devices]:
            self.device_combo.addItem(device, device)
        # A device stored on another machine (or a GPU gone missing) is kept, not silently replaced.
        if self.device_combo.findData(current) < 0:
            self.device_combo.addItem(f"{current} (not available)", current)
        self.device_combo.setCurrentIndex(self.device_combo.findData(current))
        self.device_combo.blockSignals(False)

    # --- the catalogue, the precision and the draft model ----------------------------------------

    def chosen_model(self) -> catalog.CatalogModel | None:
        """The catalogue model chosen in the model combo (None: Other)."""
        return catalog.find(self.model_combo.currentData() or "") if self.model_combo.currentData() != _OTHER else None

    def chosen_draft_model(self) -> catalog.CatalogModel | None:
        data = self.draft_model_combo.currentData()
        return catalog.find(data) if data and data != _OTHER else None

    def _model_spec(self) -> str:
        model = self.chosen_model()
        data = self.model_combo.currentData()
        if model is None and data and data != _OTHER:  # a model LM Studio or Ollama keeps here
            return data
        if model is None:
            return self.model_edit.text().strip()
        original = catalog_entry(self._original.model)
        return self._original.model if original is model else setting_name(model)

    def _draft_spec(self) -> str:
        data = self.draft_model_combo.currentData()
        if data == _OTHER:
            return self.draft_model_edit.text().strip()
        model = self.chosen_draft_model()
        if model is None:
            return ""
        return self._original.draft_model if catalog_entry(self._original.draft_model) is model else model.name

    def _typed(self, combo: QComboBox, text: str) -> None:
        """Text put in an Other line edit chooses Other."""
        if not self._filling and text.strip() and combo.currentData() != _OTHER:
            combo.setCurrentIndex(combo.findData(_OTHER))

    def _precision(self):
        """What auto picks on the chosen device (None: cannot be told here)."""
        device = self.device_combo.currentData() or "auto"
        if device != "auto" and device not in self._devices:  # stored on another machine
            return None
        if device not in self._precisions:
            self._precisions[device] = run_precision(device, "auto")
        return self._precisions[device]

    def dtype_name(self) -> str:
        """The dtype the model would run in with the form's choices."""
        chosen = self.dtype_combo.currentData() or "auto"
        if chosen != "auto":
            return chosen
        auto = self._precision()
        return auto.name if auto is not None else "float32"

    def _on_precision_changed(self, *_args) -> None:
        if self._filling:
            return
        auto = self._precision()
        if auto is None:
            text, why = "Auto (chosen when the model loads)", "This device is not available here."
        else:
            # the reason's first clause in the box, all of it in the tooltip
            text, why = f"Auto ({auto.name} here: {auto.reason.split(':')[0]})", _sentence(auto.reason)
        index = self.dtype_combo.findData("auto")
        self.dtype_combo.setItemText(index, text)
        self.dtype_combo.setItemData(index, why, Qt.ItemDataRole.ToolTipRole)
        self.dtype_combo.setToolTip(why if self.dtype_combo.currentData() == "auto" else "")
        self._refresh_items()

    def _item_text(self, model: catalog.CatalogModel) -> str:
        from draftscope.engine.backends import backend_for_gguf

        state = "downloaded" if model.fetched else "not downloaded"
        backend = backend_for_gguf(self.backend_combo.currentData() or "auto", self.device_combo.currentData())
        memory = memory_text(model.memory_needed(self.dtype_name(), backend))
        return f"{model.title} · {size_text(model.size)} · {memory} memory · {state}"

    def _refresh_items(self) -> None:
        """Catalogue entries' texts: the memory follows the precision, the state the downloads."""
        for combo in (self.model_combo, self.draft_model_combo):
            for i in range(combo.count()):
                model = catalog.find(combo.itemData(i) or "") if combo.itemData(i) != _OTHER else None
                if model is not None:
                    combo.setItemText(i, self._item_text(model))
                    combo.setItemData(i, _sentence(model.good_for), Qt.ItemDataRole.ToolTipRole)

    def _on_model_changed(self, *_args) -> None:
        if self._filling:
            return
        self._draft_note = ""
        self._filling = True
        try:
            self._fill_drafts(self._draft_spec(), keep_catalog_as_other=True)
        finally:
            self._filling = False
        self._update_model_state()
        self._update_datastore_hint()

    def _on_draft_changed(self, *_args) -> None:
        if self._filling:
            return
        self._draft_note = ""
        self._update_model_state()

    def _fill_drafts(self, spec: str, *, keep_catalog_as_other: bool = True) -> None:
        """Offer None, the catalogue models that can draft for the chosen model, and Other; select
        ``spec``. A catalogue draft model that cannot draft for a catalogue model is reset to None,
        with a note; with a model outside the catalogue it is kept as typed (checked on loading)."""
        target = self.chosen_model()
        combo = self.draft_model_combo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("None", "")
        offered = [] if target is None else [m for m in catalog.CATALOG
                                             if m is not target and catalog.why_not_draft(target, m) is None]
        for m in offered:
            combo.addItem(self._item_text(m), m.name)
        combo.addItem(_OTHER_TEXT, _OTHER)
        entry = catalog_entry(spec)
        if entry is not None and target is not None and entry not in offered:
            why = "it is the model itself" if entry is target else catalog.why_not_draft(target, entry)
            self._draft_note = (f"{entry.title} was the draft model; it cannot draft for {target.title} ({why}), so "
                                "the draft model is now None.")
            spec = ""
        if entry is not None and target is None and keep_catalog_as_other:
            combo.setCurrentIndex(combo.findData(_OTHER))
            self.draft_model_edit.setText(spec)
        else:
            self._select_spec(combo, self.draft_model_edit, spec)
        combo.blockSignals(False)
        self._refresh_items()

    def _draft_hint_text(self) -> str:
        target = self.chosen_model()
        lines = [self._draft_note] if self._draft_note else []
        if target is None:
            lines.append("For a model outside the catalogue no catalogue draft model is offered; the draft model's "
                         "tokenizer is checked against the model's when the model loads.")
            return "\n".join(lines)
        refused = [(m, catalog.why_not_draft(target, m)) for m in catalog.CATALOG if m is not target]
        refused = [(m, why) for m, why in refused if why]
        if len(refused) == len(catalog.CATALOG) - 1:
            lines.append(f"No catalogue model can draft for {target.title}.")
        lines += [f"Not offered: {m.title} — {why}" for m, why in refused]
        return "\n".join(lines)

    def _update_model_state(self) -> None:
        """Show and hide what fits the chosen model and draft model."""
        busy = self._job_box is not None
        model, form = self.chosen_model(), self._model_form
        form.setRowVisible(self.model_other_row, model is None)
        self.model_box.show_model(model, other="A hub id (org/name) is downloaded on first use.", busy=busy)
        draft_data = self.draft_model_combo.currentData()
        draft = self.chosen_draft_model()
        form.setRowVisible(self.draft_other_row, draft_data == _OTHER)
        self.draft_box.show_model(draft, busy=busy)
        form.setRowVisible(self.draft_box, draft is not None)
        self.draft_hint.setText(self._draft_hint_text())
        for widget in (self.model_combo, self.draft_model_combo, self.device_combo, self.dtype_combo):
            widget.setEnabled(not busy)
        restore = self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults) if hasattr(self, "buttons") \
            else None
        if restore is not None:
            restore.setEnabled(not busy)
        self._update_model_drafter()

    def _update_datastore_hint(self) -> None:
        spec = self._model_spec() or DEFAULT_MODEL
        try:
            default = default_datastore_path(spec)
        except OSError:  # the data folder cannot be made: say where it would be
            return
        state = "exists" if default.is_file() else "not built yet"
        # The state first: a long path is clipped at the end, the tooltip has it whole.
        self.datastore_edit.setPlaceholderText(f"default ({state}): {default}")
        self.datastore_edit.setToolTip(f"Empty uses the model's default datastore:\n{default} ({state})")
        # A deep home folder must not widen the dialog: elide the middle of the path.
        shown = self.datastore_hint.fontMetrics().elidedText(str(default), Qt.TextElideMode.ElideMiddle, 460)
        entry = catalog_entry(spec)
        command = f"draftscope datastore build-default --model {entry.name if entry is not None else '…'}"
        missing = "" if default.is_file() else f"\nNot built yet: {command} builds it."
        self.datastore_hint.setText(f"Empty uses the model's default datastore:\n{shown}{missing}")

    def _update_model_drafter(self) -> None:
        data = self.draft_model_combo.currentData()
        has_draft_model = bool(data) and (data != _OTHER or bool(self.draft_model_edit.text().strip()))
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
            model=self._model_spec(),
            datastore=self.datastore_edit.text().strip(),
            drafters={**self._drafters, "retrieval": self.drafter_retrieval.isChecked(),
                      "learned": self.drafter_learned.isChecked(),
                      "context": self.drafter_context.isChecked(), "model": self.drafter_model.isChecked(),
                      **({"recurrent": self.drafter_recurrent.isChecked()} if self._recurrent else {})},
            draft_model=self._draft_spec(),
            temperature=self._float(self.temperature_spin, o.temperature),
            top_p=self._float(self.top_p_spin, o.top_p),
            top_k=self.top_k_spin.value(),
            max_new_tokens=self.max_new_tokens_spin.value(),
            repetition_penalty=self._float(self.repetition_penalty_spin, o.repetition_penalty),
            seed=self.seed_spin.value(),
            system_prompt=self.system_prompt_edit.toPlainText(),
            device=self.device_combo.currentData(),
            dtype=self.dtype_combo.currentData(),
            backend=self.backend_combo.currentData(),
            theme=self.theme_combo.currentData(),
            font_size=self.font_size_spin.value(),
            server_enabled=self.server_enabled.isChecked(),
            server_port=self.server_port_spin.value(),
            server_api_key=self.server_key_edit.text().strip(),
            server_keep_history=self.server_history.isChecked(),
        )

    # --- validation -------------------------------------------------------------------------

    def problems(self) -> list[tuple[str, QWidget]]:
        """(message, widget to focus) for every invalid field of the form."""
        s = self.result_settings()
        widgets = {"temperature": self.temperature_spin, "top_p": self.top_p_spin, "top_k": self.top_k_spin,
                   "max_new_tokens": self.max_new_tokens_spin, "repetition_penalty": self.repetition_penalty_spin,
                   "seed": self.seed_spin,
                   "dtype": self.dtype_combo, "backend": self.backend_combo, "theme": self.theme_combo, "font_size": self.font_size_spin,
                   "server_port": self.server_port_spin, "server_api_key": self.server_key_edit}
        out = [(p, widgets[p.split()[0]]) for p in s.problems()]
        if not s.model:
            out.append(("Model: choose a model, or enter a model folder, a .gguf file or a hub id", self.model_edit))
        chosen = (("Model", self.chosen_model(), self.model_box, s.model, self._original.model),
                  ("Draft model", self.chosen_draft_model(), self.draft_box, s.draft_model, self._original.draft_model))
        for label, model, box, spec, before in chosen:
            # A model that is not downloaded cannot be switched to; one already in use loads as ever.
            if model is None or model.fetched or catalog_entry(before) is model:
                continue
            if box is self._job_box:
                out.append((f"{label}: {model.title} is still downloading", box.cancel_button))
            else:
                out.append((f"{label}: {model.title} is not downloaded yet ({size_text(model.size)}): press Download, "
                            "or choose another", box.download_button))
        others = (("Model", self.model_combo, self.model_edit), ("Draft model", self.draft_model_combo,
                                                                  self.draft_model_edit))
        for label, combo, edit in others:
            spec = edit.text().strip()
            if combo.currentData() == _OTHER and spec:
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
                    Reader(path, in_memory=False)  # a check of the header, not a load
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

    # --- downloading a catalogue model ------------------------------------------------------

    def _start_download(self, box: _DownloadBox) -> None:
        model = box.model
        if model is None or self._job_box is not None:
            return
        if self._thread is None:
            self._worker = _JobWorker()
            self._thread = WorkerThread(self._worker)
        cancel = threading.Event()
        fetch_model = self._fetch_model

        def job(report, status):
            return fetch_model(model, progress=lambda done, total: report((done, total)), cancel=cancel,
                               on_status=status)

        self._job_box, self._job_cancel = box, cancel
        self._rate.restart()
        self._job_line, self._job_phase = f"Downloading {model.title} …", ""
        box.show_status(self._job_line)
        box.progress.setRange(0, 0)  # indeterminate until the size is known
        box.bar_row.show()
        box.cancel_button.setEnabled(True)
        self.error_label.hide()
        self._update_model_state()
        self._worker.take()  # nothing left over from an earlier job
        self._worker.job = job
        QMetaObject.invokeMethod(self._worker, "run", Qt.ConnectionType.QueuedConnection)
        self._poll.start()

    def _cancel_download(self) -> None:
        if self._job_cancel is not None and self._job_box is not None:
            self._job_cancel.set()
            self._job_box.cancel_button.setEnabled(False)
            self._job_box.show_status("Cancelling …")

    def _poll_job(self) -> None:
        progress, status, outcome = self._worker.take()
        box = self._job_box
        if box is None:
            self._poll.stop()
            return
        cancelled = self._job_cancel is not None and self._job_cancel.is_set()
        if status is not None and not cancelled:
            text = status.strip().replace("...", "…")
            if not (len(box.model.parts) == 1 and text.startswith("downloading part")):
                self._job_phase = part_status(text[:1].upper() + text[1:])
        if progress is not None and not cancelled:
            self._show_bytes(box, *progress)
        if (status is not None or progress is not None) and not cancelled:
            box.show_status("\n".join(t for t in (self._job_line, self._job_phase) if t))
        if outcome is not None:
            self._poll.stop()
            self._job_done(*outcome)

    def _show_bytes(self, box: _DownloadBox, done: int, total: int) -> None:
        self._job_line = self._rate.show(box.progress, f"Downloading {box.model.title}", done, total)

    def _job_done(self, what: str, value) -> None:
        box, cancel = self._job_box, self._job_cancel
        self._job_box = self._job_cancel = None
        if self._closed or box is None:
            return
        model = box.model
        box.bar_row.hide()
        if what == "done" and model is not None and model.fetched:
            box.show_status(f"{model.title} is downloaded.")
        elif (cancel is not None and cancel.is_set()) or isinstance(value, assets.FetchCancelled):
            several = model is not None and len(model.parts) > 1
            box.show_status("Download cancelled." + (" The parts downloaded so far are kept: Download resumes it."
                                                     if several else ""))
        elif what == "done":  # the fetcher returned, yet the file is not where the catalogue says
            box.show_status(f"The download ended, but {model.path} is missing.", error=True)
        else:
            folder = model.path.parent if model is not None else None
            box.show_status(f"The model could not be downloaded. {describe_error(value, folder)} Press Download to "
                            "retry.", error=True)
        self._refresh_items()
        self._update_model_state()

    # --- closing -----------------------------------------------------------------------------

    def reject(self) -> None:
        self._cancel_download()  # the fetcher keeps finished parts, and removes a partial one
        super().reject()

    def done(self, result: int) -> None:
        self._closed = True
        if self._job_cancel is not None:
            self._job_cancel.set()
        self._poll.stop()
        super().done(result)
        if self._thread is not None:
            end_job_thread(self._thread)
            self._thread = None

    # --- file pickers -----------------------------------------------------------------------

    def _start_folder(self, text: str) -> str:
        path = Path(text).expanduser()
        return str(path if path.is_dir() else path.parent) if text and catalog_entry(text) is None else str(Path.home())

    def _browse_folder(self, edit: QLineEdit, title: str) -> None:
        folder = QFileDialog.getExistingDirectory(self, title, self._start_folder(edit.text()))
        if folder:
            edit.setText(folder)

    def _browse_gguf(self, edit: QLineEdit, title: str) -> None:
        path, _ = QFileDialog.getOpenFileName(self, title, self._start_folder(edit.text()),
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            edit.setText(path)

    def _browse_datastore(self) -> None:
        start = self.datastore_edit.text() or str(default_datastore_path(self._model_spec() or DEFAULT_MODEL).parent)
        path, _ = QFileDialog.getOpenFileName(self, "Datastore", self._start_folder(start),
                                              "Draftscope index (*.idx);;All files (*)")
        if path:
            self.datastore_edit.setText(path)
