"""The settings dialog: edits a copy of the Settings in six tabs and refuses OK, with an inline
message, while a field is invalid (out of range, a model path or datastore that does not exist,
a file that is not a Draftscope index, a newly chosen catalogue model not downloaded yet).

The Model tab offers the model catalogue (size, memory needed, downloaded or not; a download runs
in the dialog with progress and cancel: ``DownloadBox``), the precision (auto says what it picks
here and why) and only the draft models that share the chosen model's tokenizer, saying why the
others are not offered. Its widgets and downloads: ``settings_model_tab``; the other tabs:
``settings_tabs`` and ``tools_tab`` (MCP servers); the rules, without Qt: ``draftscope.core.settings_checks``."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QLineEdit,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from draftscope.core.settings_checks import (
    EMPTY_MODEL,
    OTHER,
    auto_precision_text,
    available_devices,
    catalog_entry,
    catalog_item_text,
    catalog_setting,
    datastore_problem,
    download_problem,
    draft_candidates,
    draft_hint,
    dropped_draft_note,
    model_problem,
)
from draftscope.core.words import run_precision, sentence
from draftscope.engine.backends import backend_for_gguf
from draftscope.engine.backends.llama import gpu_offload
from draftscope.gui.dialogs.gpu_layers_row import GpuLayers
from draftscope.gui.dialogs.settings_model_tab import OTHER_TEXT, ModelTabParts
from draftscope.gui.dialogs.settings_tabs import AppearanceTab, ContextLength, DraftingTab, GenerationTab, ServerTab
from draftscope.gui.dialogs.tools_tab import ToolsTab
from draftscope.gui.fit_screen import fit_dialog, scroll_tabs
from draftscope.gui.form_widgets import align_label_columns, hint, row, show_error
from draftscope.models import catalog
from draftscope.models.resolve import DEFAULT_MODEL
from draftscope.storage.settings import DTYPES, Section, Settings

BACKEND_CHOICES = (("auto", "Auto"), ("llama.cpp", "llama.cpp (GGUF files)"), ("torch", "torch (transformers)"))


class SettingsDialog(ModelTabParts, QDialog):
    """``SettingsDialog(settings)``; after ``exec()`` returns Accepted, ``result_settings()`` is the
    edited copy. ``devices`` overrides the detected device list, ``fetch_model`` the catalogue
    download (tests); ``learned`` and ``recurrent`` say in words what the model has learned from its
    answers and its recurrent head ("" when it has none)."""

    def __init__(
        self,
        settings: Settings,
        parent: QWidget | None = None,
        *,
        devices: Sequence[str] | None = None,
        fetch_model=catalog.fetch_model,
        learned: str = "",
        recurrent: str = "",
    ) -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self._original = copy.deepcopy(settings)
        self._devices = list(devices) if devices is not None else available_devices()
        self._fetch_model = fetch_model
        self._precisions: dict[str, object] = {}  # device -> what auto picks there (run_precision)
        self._filling = False  # widgets being set from settings: no reactions
        self._draft_note = ""  # why a draft model was reset to None

        self.tabs = QTabWidget(objectName="settingsTabs")
        self.tabs.addTab(self._model_tab(), "Model")
        self.drafting = DraftingTab(
            learned=learned, recurrent=recurrent, model_spec=lambda: self._model_spec() or DEFAULT_MODEL
        )
        self.generation, self.appearance, self.server = GenerationTab(), AppearanceTab(), ServerTab()
        self.tools = ToolsTab()
        self.tabs.addTab(self.drafting, "Drafting")
        self.tabs.addTab(self.generation, "Generation")
        self.tabs.addTab(self.appearance, "Appearance")
        self.tabs.addTab(self.server, "Server")
        self.tabs.addTab(self.tools, "Tools")
        align_label_columns(self.tabs)
        scroll_tabs(self.tabs)  # a short screen scrolls a page, never OK and Cancel off the screen

        self.error_label = QLabel(objectName="settingsError")
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        show_error(self.error_label)
        self.error_label.hide()

        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setObjectName("okButton")
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setObjectName("cancelButton")
        self.restore_button = self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        self.restore_button.setObjectName("restoreDefaultsButton")
        self.restore_button.clicked.connect(self._restore_defaults)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.error_label)
        layout.addWidget(self.buttons)
        self._show(self._original)
        fit_dialog(self, QSize(max(640, self.sizeHint().width()), self.sizeHint().height()))

    # --- the Model tab: where the model runs (the rest: ModelTabParts) ----------------------------

    def _running_rows(self, form) -> None:
        """Where and how the model runs: device, precision, backend, workers and context length."""
        self.device_combo = QComboBox(objectName="deviceCombo")
        self.device_combo.setMinimumWidth(180)
        self.device_combo.currentIndexChanged.connect(self._on_precision_changed)
        form.addRow("Device:", row(self.device_combo, stretch_first=False))
        self.dtype_combo = QComboBox(objectName="dtypeCombo")
        for name in DTYPES:
            self.dtype_combo.addItem(name, name)
        self.dtype_combo.currentIndexChanged.connect(self._on_precision_changed)
        form.addRow("Precision:", row(self.dtype_combo, stretch_first=False))
        form.addRow(
            "",
            hint(
                "Auto: bfloat16 where the hardware computes it natively, else float32 (bfloat16 "
                "halves the memory; emulated, it is many times slower).",
                wrap=True,
            ),
        )
        self.backend_combo = QComboBox(objectName="backendCombo")
        for name, text in BACKEND_CHOICES:
            self.backend_combo.addItem(text, name)
        self.backend_combo.currentIndexChanged.connect(self._on_precision_changed)  # the memory estimates follow
        form.addRow("Backend:", row(self.backend_combo, stretch_first=False))
        form.addRow(
            "",
            hint(
                "Auto: llama.cpp for a GGUF model, on the CPU and on a card its build has a backend for: it "
                "computes with the file's own quantised weights, in a fraction of the memory; torch for Hugging "
                "Face folders, other cards, and the recurrent drafter. Precision applies to torch.",
                wrap=True,
            ),
        )
        self._torch_row(form)
        self._gpu_layers_row(form)
        self.workers_edit = QLineEdit(objectName="workersEdit")
        self.workers_edit.setPlaceholderText("none: the whole model on this computer")
        form.addRow("Workers:", self.workers_edit)
        form.addRow(
            "",
            hint(
                "llama.cpp RPC workers (host:port, comma-separated) that each hold an equal share of a "
                "GGUF model's layers: run `draftscope worker --host 0.0.0.0` on each. RPC is "
                "unauthenticated: workers on a trusted network only.",
                wrap=True,
            ),
        )
        self.workers_edit.textChanged.connect(self._offer_gpu_layers)
        self.context = ContextLength()
        form.addRow("Context length:", self.context)

    def _gpu_layers_row(self, form) -> None:
        """llama.cpp's layers on a graphics card; the cards are looked for once (it loads llama.cpp)."""
        self.gpu_layers = GpuLayers(gpu_offload.cards())
        form.addRow("GPU layers:", self.gpu_layers)
        for combo in (self.backend_combo, self.device_combo):
            combo.currentIndexChanged.connect(self._offer_gpu_layers)

    def _offer_gpu_layers(self, *_args) -> None:
        """The GPU-layers row is enabled only where the chosen backend, device and workers use it."""
        backend, device = self.backend_combo.currentData() or "auto", self.device_combo.currentData() or "auto"
        self.gpu_layers.offer(backend, device, self.workers_edit.text())

    def _restore_defaults(self) -> None:
        """The defaults, but the user's own things kept: their presets and their MCP servers."""
        self._show(Settings(prompt_presets=self.generation.presets.user, mcp_servers=self.tools.model.values()))

    def _show(self, s: Settings) -> None:
        if self._downloading():  # Restore defaults during a download: it goes on
            return
        self._filling = True
        try:
            self._draft_note = ""
            self._select_spec(self.model_combo, self.model_edit, s.model)
            self._fill_devices(s.device)
            self.dtype_combo.setCurrentIndex(max(0, self.dtype_combo.findData(s.dtype)))
            self.backend_combo.setCurrentIndex(max(0, self.backend_combo.findData(s.backend)))
            self.workers_edit.setText(s.workers)
            self._fill_drafts(s.draft_model)
        finally:
            self._filling = False
        tabs = (self.context, self.gpu_layers, self.drafting, self.generation, self.appearance, self.server, self.tools)
        for tab in tabs:
            tab.show_settings(s)
        self._on_precision_changed()
        self._offer_gpu_layers()
        self._update_model_state()
        self.drafting.update_default_datastore()
        self.error_label.hide()

    def result_settings(self) -> Settings:
        """A new Settings holding what the form shows, and what the app remembers (recent models,
        the window's shape) as it was: the form does not show it."""
        remembered = {name: copy.deepcopy(getattr(self._original, name)) for name in Section.REMEMBERED.names}
        return Settings(
            **remembered,
            model=self._model_spec(),
            draft_model=self._draft_spec(),
            device=self.device_combo.currentData(),
            dtype=self.dtype_combo.currentData(),
            backend=self.backend_combo.currentData(),
            workers=self.workers_edit.text().strip(),
            **self.drafting.values(),
            **self.generation.values(self._original),
            **self.appearance.values(),
            **self.server.values(),
            **self.tools.values(),
            **self.context.values(),
            **self.gpu_layers.values(),
        )

    def _select_spec(self, combo: QComboBox, edit: QLineEdit, spec: str) -> None:
        """Select the catalogue entry ``spec`` names, else Other with ``spec`` in the line edit."""
        entry = catalog_entry(spec)
        index = (
            combo.findData(entry.name) if entry is not None else combo.findData(spec.strip()) if spec.strip() else -1
        )
        if index >= 0:
            combo.setCurrentIndex(index)
            edit.clear()
        elif spec.strip():
            combo.setCurrentIndex(combo.findData(OTHER))
            edit.setText(spec)
        else:  # nothing: the draft model's None; an empty Other for the model (refused on OK)
            none = combo.findData("")
            combo.setCurrentIndex(none if none >= 0 else combo.findData(OTHER))
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
        return catalog.find(self.model_combo.currentData() or "") if self.model_combo.currentData() != OTHER else None

    def chosen_draft_model(self) -> catalog.CatalogModel | None:
        data = self.draft_model_combo.currentData()
        return catalog.find(data) if data and data != OTHER else None

    def _model_spec(self) -> str:
        model = self.chosen_model()
        data = self.model_combo.currentData()
        if model is None and data and data != OTHER:  # a model LM Studio or Ollama keeps here
            return data
        if model is None:
            return self.model_edit.text().strip()
        return catalog_setting(model, self._original.model)

    def _draft_spec(self) -> str:
        if self.draft_model_combo.currentData() == OTHER:
            return self.draft_model_edit.text().strip()
        model = self.chosen_draft_model()
        return "" if model is None else catalog_setting(model, self._original.draft_model, draft=True)

    def _typed(self, combo: QComboBox, text: str) -> None:
        """Text put in an Other line edit chooses Other."""
        if not self._filling and text.strip() and combo.currentData() != OTHER:
            combo.setCurrentIndex(combo.findData(OTHER))

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
        text, why = auto_precision_text(self._precision())
        index = self.dtype_combo.findData("auto")
        self.dtype_combo.setItemText(index, text)
        self.dtype_combo.setItemData(index, why, Qt.ItemDataRole.ToolTipRole)
        self.dtype_combo.setToolTip(why if self.dtype_combo.currentData() == "auto" else "")
        self._refresh_items()

    def _item_text(self, model: catalog.CatalogModel) -> str:
        backend = backend_for_gguf(self.backend_combo.currentData() or "auto", self.device_combo.currentData())
        return catalog_item_text(model, self.dtype_name(), backend)

    def _refresh_items(self) -> None:
        """Catalogue entries' texts: the memory follows the precision, the state the downloads."""
        for combo in (self.model_combo, self.draft_model_combo):
            for i in range(combo.count()):
                model = catalog.find(combo.itemData(i) or "") if combo.itemData(i) != OTHER else None
                if model is not None:
                    combo.setItemText(i, self._item_text(model))
                    combo.setItemData(i, sentence(model.good_for), Qt.ItemDataRole.ToolTipRole)

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
        self.drafting.update_default_datastore()

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
        offered = draft_candidates(target)
        for m in offered:
            combo.addItem(self._item_text(m), m.name)
        combo.addItem(OTHER_TEXT, OTHER)
        entry = catalog_entry(spec)
        if entry is not None and target is not None and entry not in offered:
            self._draft_note = dropped_draft_note(entry, target)
            spec = ""
        if entry is not None and target is None and keep_catalog_as_other:
            combo.setCurrentIndex(combo.findData(OTHER))
            self.draft_model_edit.setText(spec)
        else:
            self._select_spec(combo, self.draft_model_edit, spec)
        combo.blockSignals(False)
        self._refresh_items()

    def _update_model_state(self) -> None:
        """Show and hide what fits the chosen model and draft model; while a download runs, the
        model choices wait."""
        busy = self._downloading()
        model, form = self.chosen_model(), self._model_form
        form.setRowVisible(self.model_other_row, model is None)
        self.model_box.show_model(model, other="A hub id (org/name) is downloaded on first use.", busy=busy)
        draft = self.chosen_draft_model()
        form.setRowVisible(self.draft_other_row, self.draft_model_combo.currentData() == OTHER)
        offer = self._draft_offer() if draft is None else None
        self.draft_box.show_model(draft or offer, busy=busy, offered_for=model if offer is not None else None)
        form.setRowVisible(self.draft_box, (draft or offer) is not None)
        self.draft_hint.setText(draft_hint(model, self._draft_note))
        for widget in (self.model_combo, self.draft_model_combo, self.device_combo, self.dtype_combo):
            widget.setEnabled(not busy)
        self.restore_button.setEnabled(not busy)
        self._update_model_drafter()

    def _draft_offer(self) -> catalog.CatalogModel | None:
        """With None as the draft model: a catalogue model that can draft for the model but is not
        on disk, offered with a Download button (the list only says "not downloaded")."""
        if self.draft_model_combo.currentData() != "":
            return None
        return next((m for m in draft_candidates(self.chosen_model()) if not m.fetched), None)

    def _update_model_drafter(self) -> None:
        data = self.draft_model_combo.currentData()
        typed = bool(self.draft_model_edit.text().strip())
        self.drafting.set_draft_model_chosen(bool(data) and (data != OTHER or typed))

    # --- validation -------------------------------------------------------------------------

    def problems(self) -> list[tuple[str, QWidget]]:
        """(message, widget to focus) for every invalid field of the form."""
        s = self.result_settings()
        widgets = {
            "model": self.model_edit,
            "draft_model": self.draft_model_edit,
            "device": self.device_combo,
            "dtype": self.dtype_combo,
            "backend": self.backend_combo,
            "workers": self.workers_edit,
            **self.drafting.fields,
            **self.generation.fields,
            **self.appearance.fields,
            **self.server.fields,
            **self.tools.fields,
            **self.context.fields,
            **self.gpu_layers.fields,
        }
        out = [(p, widgets.get(p.split()[0], self.tabs)) for p in s.problems()]
        if not s.model:
            out.append((EMPTY_MODEL, self.model_edit))
        chosen = (
            ("Model", self.chosen_model(), self.model_box, self._original.model),
            ("Draft model", self.chosen_draft_model(), self.draft_box, self._original.draft_model),
        )
        for label, model, box, before in chosen:
            downloading = box.download.running
            problem = download_problem(label, model, before, downloading=downloading)
            if problem:
                out.append((problem, box.download.cancel_button if downloading else box.download_button))
        for label, combo, edit in (
            ("Model", self.model_combo, self.model_edit),
            ("Draft model", self.draft_model_combo, self.draft_model_edit),
        ):
            problem = model_problem(label, edit.text()) if combo.currentData() == OTHER else None
            if problem:
                out.append((problem, edit))
        problem = datastore_problem(s.datastore)
        if problem:
            out.append((problem, self.drafting.datastore_edit))
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

    # --- closing -----------------------------------------------------------------------------

    def reject(self) -> None:
        for box in (self.model_box, self.draft_box):
            box.download.cancel()  # the fetcher keeps finished parts, and removes a partial one
        super().reject()

    def done(self, result: int) -> None:
        super().done(result)
        for box in (self.model_box, self.draft_box):
            box.download.close()
        self.tools.close()  # a listing of a server's tools under way is given up
