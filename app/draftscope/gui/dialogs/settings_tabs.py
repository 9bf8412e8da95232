"""The settings dialog's plain tabs: Drafting, Generation, Appearance and Server (the Model tab, with
its catalogue and downloads, is the dialog's own; its context length row is here). Each shows a
Settings (``show_settings``), gives back its fields (``values``) and names the widget for each
field's problems (``fields``)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from draftscope import paths
from draftscope.core.settings_checks import browse_start, build_default_command
from draftscope.core.words import size_text
from draftscope.datastore.default import default_datastore_path
from draftscope.drafter_kinds import DRAFT_MODEL, HEAD, LEARNED, DrafterKind, kinds, switched_on
from draftscope.engine import kv_disk
from draftscope.gui.dialogs.model_sampling_rows import ModelSamplingRows, sampling_rows, sampling_spins
from draftscope.gui.dialogs.prompt_presets import PresetPicker
from draftscope.gui.form_widgets import form_layout, hint, int_spin, row
from draftscope.gui.threads_choice import ThreadsCombo
from draftscope.models.recommended_sampling import recommended_for
from draftscope.rules import CONTEXT_RANGE, LLAMA_CONTEXT, NO_SEED, RANGES, SEED_RANGE
from draftscope.storage.settings import MAX_KV_CACHE_MB, MAX_PARALLEL, Settings

THEMES = (("System", "system"), ("Light", "light"), ("Dark", "dark"))
SEED_HINT = (
    "sampled answers: the same seed writes the same answer, with or "
    "without drafts; each answer shows its seed; Regenerate draws a "
    "new one"
)
THREADS_HINT = "CPU threads the model computes on; fewer leave room for other work (the model is loaded again)"
READ_AHEAD_TEXT = "Read the conversation, its files and your message while you type"
READ_AHEAD_HINT = (
    "Send then reads only what is left, so the answer starts sooner; off saves the work (a laptop on battery)"
)
STOP_LOOPS_TEXT = "Stop an answer that repeats itself word for word"
STOP_LOOPS_HINT = (
    "An answer whose last few hundred tokens say one line or phrase over and over ends there, and says so; "
    "Continue writes on. The words before the stop are the same either way."
)
DISK_CACHES_HINT = (
    "Each conversation's cache is kept on disk, so one you come back to (after another, or a restart) is "
    "restored instead of read again; beyond this size the least recently used go. None: nothing kept."
)


def _hinted(field: QWidget, text: str, *, wrap: bool = False) -> QWidget:
    """A field with its hint beside it, both at their own width."""
    return row(field, hint(text, wrap=wrap), stretch_first=False)


def _server_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1  (editors, scripts, the openai client)"


class ContextLength(QWidget):
    """The Model tab's context length: tokens the model reads at once (0: the model's default)."""

    def __init__(self) -> None:
        super().__init__()
        self.spin = int_spin("contextLengthSpin", 0, CONTEXT_RANGE.high)
        self.spin.setSpecialValueText("model default")
        self.spin.setSingleStep(1024)
        self.spin.setSuffix(" tokens")
        why = hint(
            "The conversation, attached files and the answer must all fit in it; a longer context "
            f"takes more memory (its cache grows with it). Model default: {LLAMA_CONTEXT:,} on llama.cpp, "
            "the model's own on torch; never more than the model was trained on.",
            wrap=True,
        )
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(row(self.spin, stretch_first=False))
        column.addWidget(why)
        self.fields = {"context_length": self.spin}

    def show_settings(self, s: Settings) -> None:
        self.spin.setValue(s.context_length)

    def values(self) -> dict:
        return {"context_length": self.spin.value()}


class DraftingTab(QWidget):
    """The datastore (empty: the model's default, named under the field) and the drafters' switches.
    ``learned`` and ``recurrent`` say in words what the model has learned and its recurrent head
    ("": none); ``model_spec()`` is the model the form shows, whose default datastore is meant."""

    def __init__(self, *, learned: str, recurrent: str, model_spec: Callable[[], str]) -> None:
        super().__init__()
        self._recurrent, self._model_spec = recurrent, model_spec
        self._drafters: dict = {}  # the stored switches: the base of values() (Restore Defaults included)
        form = form_layout(self)
        self.datastore_edit = QLineEdit(objectName="datastoreEdit")
        browse = QPushButton("Browse…", objectName="browseDatastoreButton")
        browse.setToolTip("Choose a Draftscope index (.idx)")
        browse.clicked.connect(self._browse)
        form.addRow("Datastore:", row(self.datastore_edit, browse))
        self.datastore_hint = hint("", objectName="datastoreHint")
        self.datastore_hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", self.datastore_hint)

        # one switch per drafter kind (drafter_kinds.py), in its order
        self.boxes = {k.name: self._switch(k) for k in kinds()}
        self.model = self.boxes["model"]  # the Model tab ticks it when the draft model it offered is chosen
        form.addRow("Drafters:", self._switches(learned, recurrent))
        self.fields = {"datastore": self.datastore_edit}

    def _offered(self, k: DrafterKind) -> bool:
        """Whether the switch can be used: a head-drafter's only once a head is trained."""
        return k.needs is not HEAD or bool(self._recurrent)

    def _switch(self, k: DrafterKind) -> QCheckBox:
        box = QCheckBox(k.label, objectName="drafter" + k.name.capitalize())
        box.setEnabled(self._offered(k))
        box.setToolTip(k.tip if self._offered(k) else k.needs.hint)
        return box

    def _switches(self, learned: str, recurrent: str) -> QWidget:
        """The switches, what the model has learned under the learned answers' and its head under the head's."""
        drafters = QWidget()
        column = QVBoxLayout(drafters)
        column.setContentsMargins(0, 0, 0, 0)
        for k in kinds():
            column.addWidget(self.boxes[k.name])
            if k.needs is LEARNED and learned:
                words = learned.removesuffix(" (off)") + " (File ▸ Forget the learned answers clears them)"
                column.addWidget(hint(words, objectName="learnedHint"))
            if k.needs is HEAD and recurrent:
                column.addWidget(hint(f"The head: {recurrent}", objectName="recurrentHint"))
        return drafters

    def show_settings(self, s: Settings) -> None:
        self.datastore_edit.setText(s.datastore)
        self._drafters = dict(s.drafters)
        # a switch that cannot be used stays unticked (nothing drafts), and the stored switch is kept as it is
        for k in kinds():
            self.boxes[k.name].setChecked(self._offered(k) and switched_on(s.drafters, k.name))

    def values(self) -> dict:
        switches = {k.name: self.boxes[k.name].isChecked() for k in kinds() if self._offered(k)}
        return {"datastore": self.datastore_edit.text().strip(), "drafters": {**self._drafters, **switches}}

    def set_draft_model_chosen(self, chosen: bool) -> None:
        """The draft-model drafter needs a draft model (chosen on the Model tab)."""
        for k in kinds():
            if k.needs is DRAFT_MODEL:
                self.boxes[k.name].setEnabled(chosen)
                self.boxes[k.name].setToolTip(k.tip if chosen else k.needs.hint)

    def update_default_datastore(self) -> None:
        """Name the model's default datastore under the field, and whether it is built."""
        spec = self._model_spec()
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
        missing = "" if default.is_file() else f"\nNot built yet: {build_default_command(spec)} builds it."
        self.datastore_hint.setText(f"Empty uses the model's default datastore:\n{shown}{missing}")

    def _browse(self) -> None:
        start = self.datastore_edit.text() or str(default_datastore_path(self._model_spec()).parent)
        path, _ = QFileDialog.getOpenFileName(
            self, "Datastore", browse_start(start), "Draftscope index (*.idx);;All files (*)"
        )
        if path:
            self.datastore_edit.setText(path)


class DiskCaches(QWidget):
    """The conversations' caches kept on disk: their size budget, the space they take now, and Clear."""

    def __init__(self) -> None:
        super().__init__()
        self.budget = int_spin("kvCacheBudgetSpin", 0, MAX_KV_CACHE_MB)
        self.budget.setSuffix(" MB")
        self.budget.setSingleStep(256)
        self.budget.setSpecialValueText("none")
        self.budget.setToolTip(DISK_CACHES_HINT)
        self.use = hint("", objectName="kvCacheUse")
        self.clear_button = QPushButton("Clear", objectName="clearKvCachesButton")
        self.clear_button.setToolTip("Remove every saved cache: conversations are read again when next used")
        self.clear_button.clicked.connect(self.clear)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(row(self.budget, self.use, self.clear_button, stretch_first=False))
        self.show_use()

    def show_use(self) -> None:
        """What the saved caches take on disk now (the folder cannot be read: said so)."""
        try:
            used = kv_disk.disk_use(paths.kv_cache_dir())
        except OSError as exc:
            self.use.setText(f"not readable: {exc.strerror or exc}")
            self.clear_button.setEnabled(False)
            return
        self.use.setText(f"{size_text(used)} kept now" if used else "none kept now")
        self.clear_button.setEnabled(used > 0)

    def clear(self) -> None:
        try:
            kv_disk.clear_all(paths.kv_cache_dir())
        except OSError as exc:
            self.use.setText(f"not cleared: {exc.strerror or exc}")
            return
        self.show_use()


class GenerationTab(QWidget):
    """Sampling, the answer's length, the seed, the system prompt, and reading before Send."""

    def __init__(self) -> None:
        super().__init__()
        form = form_layout(self)
        for label, field in self._number_rows():
            form.addRow(label, field)
        self.stop_loops = QCheckBox(STOP_LOOPS_TEXT, objectName="stopLoopsCheck", toolTip=STOP_LOOPS_HINT)
        form.addRow("Loops:", self.stop_loops)
        self._add_prompt_rows(form)
        self._add_reading_rows(form)
        self.fields = {
            "prompt_presets": self.presets.name_edit,
            **self.sampling,
            "max_new_tokens": self.max_new_tokens,
            "model_sampling": self.model_sampling.check,
            "seed": self.seed,
            "stop_loops": self.stop_loops,
            "system_prompt": self.system_prompt,
            "threads": self.threads,
            "kv_cache_budget_mb": self.disk_caches.budget,
        }

    def _number_rows(self) -> tuple[tuple[str, QWidget], ...]:
        """(label, field) for sampling, the answer's length, the seed and the threads, each with its hint."""
        self.sampling = sampling_spins()  # setting name -> spin box, one per field of SamplingParams
        self.max_new_tokens = int_spin("maxNewTokensSpin", RANGES["max_new_tokens"].low, RANGES["max_new_tokens"].high)
        self.max_new_tokens.setSingleStep(64)
        self.max_new_tokens.setSpecialValueText("until the model stops")
        self.model_sampling = ModelSamplingRows(self.sampling)
        self.seed = int_spin("seedSpin", NO_SEED, SEED_RANGE.high)
        self.seed.setSpecialValueText("random")
        self.threads = ThreadsCombo()  # Automatic, all cores, one left free, … 1 (gui/threads_choice.py)
        return (
            ("Sampling:", self.model_sampling.check),
            ("", self.model_sampling.note),
            *sampling_rows(self.sampling),
            ("Max new tokens:", _hinted(self.max_new_tokens, "0 = until the model stops, within the context")),
            ("Seed:", _hinted(self.seed, SEED_HINT, wrap=True)),
            ("Threads:", _hinted(self.threads, THREADS_HINT, wrap=True)),
        )

    def _add_prompt_rows(self, form: QFormLayout) -> None:
        """The system prompt, under the preset picker and over the preset saver."""
        self.system_prompt = QPlainTextEdit(objectName="systemPromptEdit")
        self.system_prompt.setPlaceholderText("none: the model's own default")
        self.system_prompt.setMinimumHeight(100)
        self.presets = PresetPicker(self.system_prompt)
        form.addRow("Preset:", self.presets.chooser)
        form.addRow("System prompt:", self.system_prompt)
        form.addRow("", self.presets.saver)

    def _add_reading_rows(self, form: QFormLayout) -> None:
        """Reading ahead of Send, and the caches kept on disk."""
        self.read_ahead = QCheckBox(READ_AHEAD_TEXT, objectName="readAheadCheck")
        self.read_ahead.setToolTip(READ_AHEAD_HINT)
        self.disk_caches = DiskCaches()
        form.addRow("Read ahead:", self.read_ahead)
        form.addRow("Caches on disk:", self.disk_caches)

    def show_settings(self, s: Settings) -> None:
        self.read_ahead.setChecked(s.read_ahead)
        self.disk_caches.budget.setValue(s.kv_cache_budget_mb)
        for name, spin in self.sampling.items():
            spin.setValue(getattr(s, name))
        self.max_new_tokens.setValue(s.max_new_tokens)
        self.model_sampling.show_settings(s, recommended_for(s.model))
        self.seed.setValue(s.seed)
        self.stop_loops.setChecked(s.stop_loops)
        self.threads.setValue(s.threads)
        self.system_prompt.setPlainText(s.system_prompt)
        self.presets.show_presets(s.prompt_presets)

    def values(self, original: Settings) -> dict:
        """The fields; a float the spin box rounds keeps ``original``'s exact value while untouched."""
        return {
            **self.model_sampling.values(original),  # the sampling fields the model may set, and its switch
            "max_new_tokens": self.max_new_tokens.value(),
            "seed": self.seed.value(),
            "stop_loops": self.stop_loops.isChecked(),
            "system_prompt": self.system_prompt.toPlainText(),
            "threads": self.threads.value(),
            "prompt_presets": dict(self.presets.user),
            "read_ahead": self.read_ahead.isChecked(),
            "kv_cache_budget_mb": self.disk_caches.budget.value(),
        }


class AppearanceTab(QWidget):
    """The theme and the font size."""

    def __init__(self) -> None:
        super().__init__()
        form = form_layout(self)
        self.theme = QComboBox(objectName="themeCombo")
        for text, value in THEMES:
            self.theme.addItem(text, value)
        self.theme.setMinimumWidth(180)
        form.addRow("Theme:", row(self.theme, stretch_first=False))
        self.font_size = int_spin("fontSizeSpin", 6, 48)
        self.font_size.setSuffix(" pt")
        form.addRow("Font size:", row(self.font_size, stretch_first=False))
        self.fields = {"theme": self.theme, "font_size": self.font_size}

    def show_settings(self, s: Settings) -> None:
        self.theme.setCurrentIndex(max(0, self.theme.findData(s.theme)))
        self.font_size.setValue(s.font_size)

    def values(self) -> dict:
        return {"theme": self.theme.currentData(), "font_size": self.font_size.value()}


class ServerTab(QWidget):
    """The OpenAI-compatible server: on or off, its port, its key, whether served answers are kept."""

    def __init__(self) -> None:
        super().__init__()
        form = form_layout(self)
        self.enabled = QCheckBox("Run an OpenAI-compatible server on this machine", objectName="serverEnabled")
        form.addRow(self.enabled)
        self.port = int_spin("serverPortSpin", 1, 65535)
        self.url = hint("")
        self.port.valueChanged.connect(lambda port: self.url.setText(_server_url(port)))
        form.addRow("Port:", row(self.port, self.url, stretch_first=False))
        self.key = QLineEdit(objectName="serverKeyEdit")
        self.key.setPlaceholderText("none: any program on this machine may use it")
        self.key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        form.addRow("API key:", self.key)
        self.parallel = int_spin("serverParallelSpin", 1, MAX_PARALLEL)
        form.addRow("Answers at once:", row(self.parallel, stretch_first=False))
        form.addRow(
            "",
            hint(
                "Served requests decoded together (llama.cpp shares each forward among them); your "
                "own chat never waits for them. Each holds a cache of the model's context.",
                wrap=True,
            ),
        )
        self.keep_history = QCheckBox(
            "Keep served answers in the history (inspect their drafts in the panels)", objectName="serverKeepHistory"
        )
        form.addRow(self.keep_history)
        self.requests = QPlainTextEdit(objectName="serverRequestLog", readOnly=True)
        self.requests.setPlaceholderText("Requests appear here as the server answers them")
        self.requests.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.requests.setMaximumBlockCount(200)
        form.addRow("Recent requests:", self.requests)
        self.fields = {"server_port": self.port, "server_api_key": self.key, "server_parallel": self.parallel}

    def show_requests(self, lines) -> None:
        """The server's request log so far (one line each: when, who, what, status, tokens, seconds)."""
        self.requests.setPlainText("\n".join(lines))

    def add_request(self, line: str) -> None:
        self.requests.appendPlainText(line)

    def show_settings(self, s: Settings) -> None:
        self.enabled.setChecked(s.server_enabled)
        self.port.setValue(s.server_port)
        self.url.setText(_server_url(s.server_port))  # valueChanged does not fire for the same port
        self.key.setText(s.server_api_key)
        self.keep_history.setChecked(s.server_keep_history)
        self.parallel.setValue(s.server_parallel)

    def values(self) -> dict:
        return {
            "server_enabled": self.enabled.isChecked(),
            "server_port": self.port.value(),
            "server_api_key": self.key.text().strip(),
            "server_keep_history": self.keep_history.isChecked(),
            "server_parallel": self.parallel.value(),
        }
