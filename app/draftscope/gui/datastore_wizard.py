"""The datastore wizard: build a retrieval datastore from the user's own files, in four pages.

1. **Sources** (``sourcesPage``): chat logs (ShareGPT / OpenAI JSON or JSONL), code folders, text
   files and JSONL files (with the field holding the text). Each source is checked when it is added
   by reading its first few records (a bounded read: never a whole big file) and the preview pane
   shows them; a bad source is named in ``sourcesError`` and the page cannot be left.
2. **Options** (``optionsPage``): the tokenizer (the current model's, read-only), assistant turns
   only, dedupe, a size limit and the output name (a file under ``datastores_dir()``; an existing
   one is replaced only when the user ticks "Replace it").
3. **Build** (``buildPage``): :func:`build_datastore` on a worker thread with progress, phase,
   rate and time left, and Cancel (the pipeline writes nothing on cancel: an older index at the
   same path stays as it was). A source that turns out bad while reading sends the user back to
   the sources page with the message; other failures are shown here with Retry.
4. **Summary** (``summaryPage``): what went in and what was skipped, and "Use this datastore now".

Instead of files, the sources page offers the model's own answers ("learn its style"): with the
loaded model passed in (``model=``), the build has the model answer N ShareGPT prompts and indexes
the answers (:func:`draftscope.datastore.distill.distill`); a cancelled build keeps the answers
and the next build of the same name continues from them.

Finish emits ``datastore_built(path, use_now)``; ``result_path()`` and ``use_now()`` say the same.
The tokenizer loader, the builder and the distiller can be injected (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QMetaObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox, QFileDialog, QFormLayout, QHBoxLayout, QInputDialog, QLabel, QLineEdit, QListWidget,
    QListWidgetItem, QPlainTextEdit, QProgressBar, QPushButton, QSpinBox, QSplitter, QStyle, QVBoxLayout, QWidget,
    QWizard, QWizardPage,
)

from draftscope.datastore.default import datastores_dir
from draftscope.datastore.distill import DistillProgress, DistillReport, distill, read_prompts
from draftscope.datastore.pipeline import BuildOptions, BuildReport, build_datastore
from draftscope.datastore.progress import CancelToken, Progress
from draftscope.datastore.sources import DatastoreError, Source
from draftscope.engine.models import DEFAULT_MODEL, ModelNotFoundError, load_tokenizer
from draftscope.gui.jobs import PROGRESS_STEPS as _STEPS
from draftscope.gui.jobs import POLL_INTERVAL_S, end_job_thread
from draftscope.gui.jobs import JobWorker as _JobWorker
from draftscope.gui.jobs import eta_text as _eta
from draftscope.gui.jobs import note as _note
from draftscope.gui.jobs import progress_row as _progress_row
from draftscope.gui.jobs import wrapping_label as _wrapping_label
from draftscope.words import describe_error
from draftscope.gui.worker import WorkerThread
from draftscope.retrieval import BuildCancelled
from draftscope.datastore.preview import (
    DISTILL_PROMPTS, KIND_LABELS, SourcePreview, distill_name, duration_words, model_display_name, output_file_name,
    parse_source, preview_source, short_location, size_words, source_name, suggested_name, without_spec,
)

_ERROR_STYLE = "color: #c62828;"


# --------------------------------------------------------------------------------------- pages


@dataclass
class _Entry:
    source: Source
    preview: SourcePreview
    build_error: str | None = None  # the build found this source bad (until checked again)
    item: QListWidgetItem | None = field(default=None, repr=False)

    @property
    def error(self) -> str | None:
        return self.build_error or self.preview.error


class SourcesPage(QWizardPage):
    def __init__(self, wizard: DatastoreWizard) -> None:
        super().__init__()
        self._wiz = wizard
        self.entries: list[_Entry] = []
        self.setObjectName("sourcesPage")
        self.setTitle("What should the datastore hold?")
        self.setSubTitle("Drafts come from text like what you will ask about: add chat logs, code or documents. "
                         "Each source is checked as it is added.")

        self.source_list = QListWidget(objectName="sourceList")
        self.source_list.currentRowChanged.connect(self._show_preview)
        buttons = QVBoxLayout()
        for text, name, slot in (
            ("Add chat logs…", "addChatButton", self._ask_chat),
            ("Add code folder…", "addCodeButton", self._ask_code),
            ("Add text files…", "addTextButton", self._ask_text),
            ("Add JSONL…", "addJsonlButton", self._ask_jsonl),
        ):
            button = QPushButton(text, objectName=name)
            button.setAutoDefault(False)
            button.clicked.connect(slot)
            buttons.addWidget(button)
        buttons.addSpacing(8)
        self.remove_button = QPushButton("Remove", objectName="removeSourceButton")
        self.remove_button.setAutoDefault(False)
        self.remove_button.clicked.connect(self.remove_current)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        top = QWidget()
        top_row = QHBoxLayout(top)
        top_row.setContentsMargins(0, 0, 0, 0)
        top_row.addWidget(self.source_list, 1)
        top_row.addLayout(buttons)

        self.preview = QPlainTextEdit(objectName="sourcePreview")
        self.preview.setReadOnly(True)
        self.preview.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.preview.setPlaceholderText("Add a source to see what will be read from it.")
        preview_box = QWidget()
        preview_layout = QVBoxLayout(preview_box)
        preview_layout.setContentsMargins(0, 4, 0, 0)
        preview_layout.addWidget(QLabel("Preview"))
        preview_layout.addWidget(self.preview, 1)
        splitter = QSplitter(Qt.Orientation.Vertical, objectName="sourcesSplitter")
        splitter.addWidget(top)
        splitter.addWidget(preview_box)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([150, 250])

        self.error_label = _wrapping_label(objectName="sourcesError")
        self.error_label.setStyleSheet(_ERROR_STYLE)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.recheck_button = QPushButton("Check again", objectName="recheckSourcesButton")
        self.recheck_button.setAutoDefault(False)
        self.recheck_button.setToolTip("Read the sources again (after fixing or replacing a file)")
        self.recheck_button.clicked.connect(self.recheck)
        error_row = QHBoxLayout()
        error_row.addWidget(self.error_label, 1)
        error_row.addWidget(self.recheck_button, 0, Qt.AlignmentFlag.AlignTop)
        self._files_box = splitter

        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addLayout(error_row)
        layout.addWidget(self._distill_box())
        self._update()

    def _distill_box(self) -> QWidget:
        """"Learn the model's own style": its answers to ShareGPT prompts instead of files (shown
        only when the wizard has the loaded model to answer with)."""
        self.distill_check = QCheckBox("Learn the model's own style: its answers to", objectName="distillCheck")
        self.distill_check.toggled.connect(self._on_distill_toggled)
        self.distill_count = QSpinBox(objectName="distillPromptsSpin")
        self.distill_count.setRange(1, 100_000)
        self.distill_count.setValue(DISTILL_PROMPTS)
        self.distill_count.setSuffix(" ShareGPT prompts")
        self.distill_count.setGroupSeparatorShown(True)
        self.distill_count.setEnabled(False)
        note = _note("Instead of files: the model answers these questions and the datastore holds its answers, so "
                     "drafts sound like the model and more of them are accepted. The model writes every answer, which "
                     "takes a while; a cancelled build keeps the answers and the next one continues from them.")
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.distill_check)
        row.addWidget(self.distill_count)
        row.addStretch(1)
        box = QWidget(objectName="distillBox")
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 6, 0, 0)
        column.addLayout(row)
        column.addWidget(note)
        box.setVisible(self._wiz.can_distill())
        return box

    def distilling(self) -> bool:
        return self._wiz.can_distill() and self.distill_check.isChecked()

    def _on_distill_toggled(self, on: bool) -> None:
        self.distill_count.setEnabled(on)
        self._files_box.setEnabled(not on)
        self._update()

    # --- adding and removing ---------------------------------------------------------------------

    def add(self, spec: str | Source, text_field: str | None = None) -> bool:
        """Add and check a source; False (with the reason in sourcesError) when it cannot be used."""
        try:
            source = parse_source(spec, text_field)
        except DatastoreError as exc:
            self._show_error(f"{exc}")
            return False
        for row, entry in enumerate(self.entries):
            if entry.source.spec == source.spec and entry.source.options == source.options:
                self.source_list.setCurrentRow(row)
                return entry.error is None
        entry = _Entry(source, preview_source(source))
        entry.item = QListWidgetItem()
        self.entries.append(entry)
        self.source_list.addItem(entry.item)
        self._decorate(entry)
        self.source_list.setCurrentRow(len(self.entries) - 1)
        self._update()
        return entry.error is None

    def remove_current(self) -> None:
        row = self.source_list.currentRow()
        if 0 <= row < len(self.entries):
            del self.entries[row]
            self.source_list.takeItem(row)
            self._show_preview(self.source_list.currentRow())
            self._update()

    def recheck(self) -> None:
        for entry in self.entries:
            entry.build_error = None
            entry.preview = preview_source(entry.source)
            self._decorate(entry)
        self._show_preview(self.source_list.currentRow())
        self._update()

    def mark_bad(self, spec: str, message: str) -> bool:
        """The build found the source ``spec`` unusable: flag it (False when no source matches)."""
        for row, entry in enumerate(self.entries):
            if entry.source.spec == spec:
                entry.build_error = message
                self._decorate(entry)
                self.source_list.setCurrentRow(row)
                self._update()
                return True
        return False

    def _decorate(self, entry: _Entry) -> None:
        src = entry.source
        parts = [KIND_LABELS[src.kind], source_name(src)]
        if src.kind in ("jsonl", "table"):
            parts.append(f"field “{src.options.text_field}”")
        if entry.error is None and entry.preview.summary:
            parts.append(f"({entry.preview.summary})")
        entry.item.setText("  ·  ".join(parts[:2]) + ("  " + "  ".join(parts[2:]) if parts[2:] else ""))
        entry.item.setToolTip(entry.error or str(src.path))
        style = self.style()
        icon = QStyle.StandardPixmap.SP_MessageBoxWarning if entry.error else (
            QStyle.StandardPixmap.SP_DirIcon if src.path.is_dir() else QStyle.StandardPixmap.SP_FileIcon)
        entry.item.setIcon(style.standardIcon(icon))

    def _show_preview(self, row: int) -> None:
        if not 0 <= row < len(self.entries):
            self.preview.clear()
            return
        entry = self.entries[row]
        if entry.error:
            self.preview.setPlainText(f"Cannot be used:\n{entry.error}" + (
                f"\n\n{entry.preview.text}" if entry.preview.text and entry.build_error else ""))
        else:
            self.preview.setPlainText(entry.preview.text)

    def _update(self) -> None:
        errors = [e.error for e in self.entries if e.error] if not self.distilling() else []
        if errors:
            self._show_error("\n".join(errors))
        else:
            self.error_label.clear()
            self.error_label.hide()
            self.recheck_button.hide()
        self.remove_button.setEnabled(self.source_list.currentRow() >= 0)
        self.completeChanged.emit()

    def _show_error(self, message: str) -> None:
        self.error_label.setText(message)
        self.error_label.show()
        self.recheck_button.setVisible(bool(self.entries))

    def isComplete(self) -> bool:  # noqa: N802 (Qt's name)
        if self.distilling():
            return True
        return bool(self.entries) and all(e.error is None for e in self.entries)

    def cleanupPage(self) -> None:  # noqa: N802 (keep the sources when going back)
        pass

    def sources(self) -> list[Source]:
        return [e.source for e in self.entries]

    # --- file dialogs ----------------------------------------------------------------------------

    def _ask_chat(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add chat logs", str(Path.home()),
                                                "Chat logs (*.json *.jsonl);;All files (*)")
        for path in paths:
            self.add(f"chat:{path}")

    def _ask_code(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Add a code folder", str(Path.home()))
        if path:
            self.add(f"code:{path}")

    def _ask_text(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add text files", str(Path.home()),
                                                "Text (*.txt *.md *.markdown *.rst *.text);;All files (*)")
        for path in paths:
            self.add(f"text:{path}")

    def _ask_jsonl(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add a JSONL file", str(Path.home()),
                                              "JSON Lines (*.jsonl *.ndjson);;All files (*)")
        if not path:
            return
        name, ok = QInputDialog.getText(self, "Field holding the text",
                                        "Which field of each record holds the text? (a dotted path such as "
                                        "data.body is fine)", QLineEdit.EchoMode.Normal, "text")
        if ok and name.strip():
            self.add(f"jsonl:{path}", name.strip())


class OptionsPage(QWizardPage):
    def __init__(self, wizard: DatastoreWizard) -> None:
        super().__init__()
        self._wiz = wizard
        self._name_edited = False
        self.setObjectName("optionsPage")
        self.setTitle("Options")
        self.setSubTitle("The datastore is tokenised with the current model's tokenizer: it helps that model only.")
        self.setButtonText(QWizard.WizardButton.NextButton, "Build")
        self.setButtonText(QWizard.WizardButton.CommitButton, "Build")

        self.tokenizer_field = QLineEdit(objectName="tokenizerName")
        self.tokenizer_field.setReadOnly(True)
        self.tokenizer_field.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.assistant_check = QCheckBox("Assistant turns only", objectName="assistantOnlyCheck")
        self.assistant_check.setChecked(True)
        self.assistant_note = _note("Keep only what the assistant said: the text the model itself writes "
                                    "(recommended). Off: whole conversations.")
        self.dedupe_check = QCheckBox("Skip duplicate documents", objectName="dedupeCheck")
        self.max_tokens = QSpinBox(objectName="maxTokensSpin")
        self.max_tokens.setRange(0, 2_000_000_000)
        self.max_tokens.setSingleStep(1_000_000)
        self.max_tokens.setSpecialValueText("no limit")
        self.max_tokens.setSuffix(" tokens")
        self.max_tokens.setGroupSeparatorShown(True)
        self.max_tokens.setMinimumWidth(200)
        size_note = _note("Stop reading once the datastore holds this many tokens (0: no limit). "
                          "An index takes about 8 bytes per token.")
        self.name_edit = QLineEdit(objectName="outputName")
        self.name_edit.textEdited.connect(self._on_name_edited)
        self.name_edit.textChanged.connect(self._check_output)
        self.path_label = _note("")
        self.path_label.setObjectName("outputPath")
        self.path_label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.exists_label = _wrapping_label(objectName="outputExists")
        self.replace_check = QCheckBox("Replace it", objectName="replaceCheck")
        self.replace_check.toggled.connect(lambda _: self.completeChanged.emit())

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        form.addRow("Tokenizer:", self.tokenizer_field)
        form.addRow("Chat logs:", self.assistant_check)
        form.addRow("", self.assistant_note)
        form.addRow("Duplicates:", self.dedupe_check)
        form.addRow("Size limit:", _left(self.max_tokens))
        form.addRow("", size_note)
        form.addRow(_spacer(8))
        form.addRow("Name:", self.name_edit)
        form.addRow("", self.path_label)
        exists_row = QHBoxLayout()
        exists_row.setContentsMargins(0, 0, 0, 0)
        exists_row.addWidget(self.exists_label, 1)
        exists_row.addWidget(self.replace_check, 0, Qt.AlignmentFlag.AlignTop)
        self.exists_box = QWidget()
        self.exists_box.setLayout(exists_row)
        form.addRow("", self.exists_box)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addStretch(1)

    def initializePage(self) -> None:  # noqa: N802
        spec = self._wiz.model_spec
        name = model_display_name(spec)
        self.tokenizer_field.setText(name if name == spec else f"{name}  ({spec})")
        self.tokenizer_field.setToolTip(spec)
        distilling = self._wiz.distilling()
        has_chat = any(s.kind == "chat" for s in self._wiz.sources()) and not distilling
        self.assistant_check.setEnabled(has_chat)
        self.assistant_note.setEnabled(has_chat)
        # The model's answers are indexed like the default datastore: assistant turns, all of them.
        self.dedupe_check.setEnabled(not distilling)
        self.max_tokens.setEnabled(not distilling)
        if not self._name_edited or not self.name_edit.text().strip():
            self.name_edit.setText(distill_name(spec) if distilling else suggested_name(self._wiz.sources()))
        self._check_output()

    def cleanupPage(self) -> None:  # noqa: N802 (keep the choices when going back)
        pass

    def _on_name_edited(self, _text: str) -> None:
        self._name_edited = True
        self.replace_check.setChecked(False)

    def output_path(self) -> Path | None:
        name = output_file_name(self.name_edit.text())
        return self._wiz.out_dir() / name if name else None

    def _check_output(self) -> None:
        path = self.output_path()
        exists = ""
        if path is None:
            self.path_label.setText("")
            exists = ("Give the datastore a name (letters, digits, spaces, - and _; no slashes)."
                      if self.name_edit.text().strip() else "Give the datastore a name.")
        else:
            self.path_label.setText(f"Saved as {path}")
            if path.is_dir():
                exists = f"A folder named {path.name} is in the way; choose another name."
            elif path.exists():
                exists = f"A datastore named {path.name} already exists."
        self.exists_label.setText(exists)
        self.exists_label.setStyleSheet(_ERROR_STYLE if exists else "")
        self.exists_box.setVisible(bool(exists))
        self.replace_check.setVisible(path is not None and path.is_file())
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        path = self.output_path()
        if path is None or path.is_dir():
            return False
        return not path.exists() or self.replace_check.isChecked()

    def build_options(self) -> BuildOptions:
        return BuildOptions(
            chat_mode="assistant" if self.assistant_check.isChecked() else "conversation",
            dedupe=self.dedupe_check.isChecked(),
            max_tokens=self.max_tokens.value() or None,
        )


class BuildPage(QWizardPage):
    CANCEL_NOTE = ("Cancel stops the build without writing anything: an older datastore of the same name stays as "
                   "it was.")
    DISTILL_CANCEL_NOTE = ("Cancel stops the build without writing the datastore; the answers so far are kept and "
                           "building again continues from them.")

    def __init__(self, wizard: DatastoreWizard) -> None:
        super().__init__()
        self._wiz = wizard
        self.setObjectName("buildPage")
        self.setTitle("Building the datastore")
        self.setSubTitle(" ")
        self.setCommitPage(True)  # once built, Back does not lead to a second build
        self.setButtonText(QWizard.WizardButton.CommitButton, "Next")

        self.progress = QProgressBar(objectName="buildProgress")
        self.progress.setRange(0, _STEPS)
        self.progress.setValue(0)
        self.cancel_button = QPushButton("Cancel", objectName="cancelBuildButton")
        self.cancel_button.setAutoDefault(False)
        self.cancel_button.setToolTip("Stop the build; nothing is written and an older datastore stays as it was")
        self.cancel_button.clicked.connect(wizard.cancel_build)
        self.progress_row = _progress_row(self.progress, self.cancel_button)

        self.phase_label = QLabel(objectName="buildPhase")
        self.read_label = QLabel(objectName="buildRead")
        self.tokens_label = QLabel(objectName="buildTokens")
        self.rate_label = QLabel(objectName="buildRate")
        self.eta_label = QLabel(objectName="buildEta")
        self.stats = QWidget()
        form = QFormLayout(self.stats)
        form.setContentsMargins(0, 0, 0, 0)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        for text, label in (("Phase:", self.phase_label), ("Read:", self.read_label), ("Tokens:", self.tokens_label),
                            ("Speed:", self.rate_label), ("Time left:", self.eta_label)):
            form.addRow(text, label)
        self._stats_form = form

        self.cancel_note = _note(self.CANCEL_NOTE)
        self.status_label = _wrapping_label(objectName="buildStatus")
        self.error_label = _wrapping_label(objectName="buildError")
        self.error_label.setStyleSheet(_ERROR_STYLE)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.again_button = QPushButton("Build again", objectName="buildAgainButton")
        self.again_button.setAutoDefault(False)
        self.again_button.clicked.connect(wizard.start_build)

        layout = QVBoxLayout(self)
        layout.addWidget(self.progress_row)
        layout.addSpacing(6)
        layout.addWidget(self.stats)
        layout.addSpacing(10)
        layout.addWidget(self.cancel_note)
        layout.addWidget(self.status_label)
        layout.addWidget(self.error_label)
        layout.addWidget(self.again_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addStretch(1)
        self.show_idle("", error="")

    def initializePage(self) -> None:  # noqa: N802
        wiz = self._wiz
        n = len(wiz.sources())
        path = wiz.options_page.output_path()
        name = path.name if path else "The datastore"
        model = model_display_name(wiz.model_spec)
        if wiz.distilling():
            count = wiz.sources_page.distill_count.value()
            self.setSubTitle(f"{name}: {model}'s answers to {count:,} ShareGPT prompts, then indexed.")
        else:
            self.setSubTitle(f"{name} from {n} source{'s' if n != 1 else ''}, with {model}'s tokenizer.")
        QTimer.singleShot(0, wiz.start_build)

    def cleanupPage(self) -> None:  # noqa: N802
        self.show_idle("", error="")

    def isComplete(self) -> bool:  # noqa: N802
        return self._wiz.build_report() is not None and not self._wiz.is_building()

    # --- states ----------------------------------------------------------------------------------

    def show_running(self) -> None:
        self.progress.setRange(0, 0)
        self.progress_row.show()
        self.cancel_note.show()
        self.cancel_button.setEnabled(True)
        self.stats.show()
        for label in (self.read_label, self.tokens_label, self.rate_label, self.eta_label):
            label.setText("–")
        distilling = self._wiz.distilling()
        self._stats_form.labelForField(self.read_label).setText("Answers:" if distilling else "Read:")
        self.cancel_note.setText(self.DISTILL_CANCEL_NOTE if distilling else self.CANCEL_NOTE)
        self.phase_label.setText("Starting")
        self.status_label.clear()
        self.status_label.hide()
        self.error_label.clear()
        self.error_label.hide()
        self.again_button.hide()

    def show_cancelling(self) -> None:
        self.cancel_button.setEnabled(False)
        self.phase_label.setText("Cancelling …")

    def show_idle(self, status: str, *, error: str, again: str = "Build again") -> None:
        """Not building: after a cancel (``status``) or a failure (``error``), or before a start."""
        self.progress_row.setVisible(False)
        self.cancel_note.setVisible(False)
        self.stats.setVisible(False)
        self.status_label.setText(status)
        self.status_label.setVisible(bool(status))
        self.error_label.setText(error)
        self.error_label.setVisible(bool(error))
        self.again_button.setText(again)
        self.again_button.setVisible(bool(status or error))

    def show_phase(self, text: str) -> None:
        self.phase_label.setText(text)

    def show_progress(self, p: Progress) -> None:
        fraction = p.fraction
        if p.phase == "reading":
            self.phase_label.setText("Reading and tokenising the sources")
            if fraction is None:
                self.progress.setRange(0, 0)
            else:
                self.progress.setRange(0, _STEPS)
                self.progress.setValue(int(_STEPS * fraction))
            self.eta_label.setText(_eta(p.eta_seconds) if p.eta_seconds is not None and p.eta_seconds >= 1 else
                                   ("less than a second" if p.eta_seconds is not None else "–"))
        elif p.phase == "indexing":
            self.phase_label.setText("Indexing (sorting suffixes) …")
            self.progress.setRange(0, 0)
            self.eta_label.setText("–")
        else:
            self.phase_label.setText("Done")
            self.progress.setRange(0, _STEPS)
            self.progress.setValue(_STEPS)
            self.eta_label.setText("–")
        total = f" of {size_words(p.bytes_total)}" if p.bytes_total else ""
        self.read_label.setText(f"{size_words(p.bytes_read)}{total} · {p.items:,} records")
        self.tokens_label.setText(f"{p.tokens:,}")
        self.rate_label.setText(f"{p.tokens_per_second:,.0f} tokens/s")

    def show_distill_progress(self, p: DistillProgress) -> None:
        if p.phase == "generating":
            self.phase_label.setText("The model is answering the prompts")
            self.progress.setRange(0, _STEPS)
            self.progress.setValue(int(_STEPS * (p.fraction or 0.0)))
            self.eta_label.setText("–" if p.eta_seconds is None else (_eta(p.eta_seconds) or "less than a second"))
        elif p.phase == "indexing":
            self.phase_label.setText("Indexing the answers …")
            self.progress.setRange(0, 0)
            self.eta_label.setText("–")
        else:
            self.phase_label.setText("Done")
            self.progress.setRange(0, _STEPS)
            self.progress.setValue(_STEPS)
            self.eta_label.setText("–")
        self.read_label.setText(f"{p.answers:,} of {p.total:,}")
        self.tokens_label.setText(f"{p.tokens:,} generated")
        self.rate_label.setText(f"{p.tokens_per_second:,.1f} tokens/s")


class SummaryPage(QWizardPage):
    def __init__(self, wizard: DatastoreWizard) -> None:
        super().__init__()
        self._wiz = wizard
        self.setObjectName("summaryPage")
        self.setTitle("The datastore is ready")
        self.setSubTitle(" ")
        self.path_value = _value("summaryPath")
        self.path_value.setWordWrap(True)
        self.documents_value = _value("summaryDocuments")
        self.tokens_value = _value("summaryTokens")
        self.size_value = _value("summarySize")
        self.time_value = _value("summaryTime")
        self.skipped_value = _value("summarySkipped")
        self.skipped_value.setWordWrap(True)
        self.examples = _value("summarySkipExamples")
        self.examples.setWordWrap(True)
        self.note_label = _note("")
        self.note_label.setObjectName("summaryNote")
        self.use_now_check = QCheckBox("Use this datastore now", objectName="useNowCheck")
        self.use_now_check.setChecked(True)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        form.addRow("Saved as:", self.path_value)
        form.addRow("Documents:", self.documents_value)
        form.addRow("Tokens:", self.tokens_value)
        form.addRow("File size:", self.size_value)
        form.addRow("Time:", self.time_value)
        skipped_box = QWidget()
        skipped_layout = QVBoxLayout(skipped_box)
        skipped_layout.setContentsMargins(0, 0, 0, 0)
        skipped_layout.setSpacing(4)
        skipped_layout.addWidget(self.skipped_value)
        skipped_layout.addWidget(self.examples)
        form.addRow("Skipped:", skipped_box)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addSpacing(6)
        layout.addWidget(self.note_label)
        layout.addStretch(1)
        layout.addWidget(self.use_now_check)

    def initializePage(self) -> None:  # noqa: N802
        report = self._wiz.build_report()
        if report is None:
            return
        self.setSubTitle(f"{model_display_name(self._wiz.model_spec)} can draft from it as soon as it is in use.")
        self.path_value.setText(str(report.path))
        self.documents_value.setText(f"{report.documents:,}")
        self.tokens_value.setText(f"{report.tokens:,}")
        self.size_value.setText(size_words(report.index.get("file_bytes")))
        total = report.timings.get("total", 0.0)
        rate = f" ({report.tokens / total:,.0f} tokens/s)" if total > 0 else ""
        self.time_value.setText(f"{duration_words(total)}{rate}")
        skipped = report.skipped
        parts = [f"{skipped.count:,} record{'s' if skipped.count != 1 else ''}"]
        if skipped.count:
            parts[0] += " (" + ", ".join(f"{n:,} {r}" for r, n in skipped.by_reason.most_common()) + ")"
        if report.duplicates:
            parts.append(f"{report.duplicates:,} duplicate document{'s' if report.duplicates != 1 else ''}")
        self.skipped_value.setText("; ".join(parts))
        files = [Path(s.spec.partition(":")[2]) for s in report.sources]
        lines = [f"{short_location(e['location'], files)}: {e['reason']}" for e in skipped.examples[:5]]
        if skipped.count > 5:
            lines.append(f"… and {skipped.count - 5:,} more (all listed in the manifest)")
        self.examples.setText("\n".join(lines))
        self.examples.setVisible(bool(lines))
        notes = []
        distilled = self._wiz.distill_report()
        if distilled is not None:
            notes.append(f"{distilled.answers:,} answers of the model ({distilled.generated:,} written now"
                         + (f" at {distilled.tokens_per_second:,.1f} tokens/s" if distilled.generated else "")
                         + f"), kept in {distilled.answers_path.name}.")
        if report.stopped_at_max_tokens:
            notes.append("Reading stopped at the size limit.")
        if self._wiz.finished_despite_cancel:
            notes.append("The build finished before the cancel reached it.")
        notes.append(f"What went in is recorded in {report.manifest_path.name}.")
        self.note_label.setText(" ".join(notes))


def _value(name: str) -> QLabel:
    label = QLabel(objectName=name)
    label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _left(widget: QWidget) -> QWidget:
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(widget)
    row.addStretch(1)
    return box


def _spacer(height: int) -> QWidget:
    w = QWidget()
    w.setFixedHeight(height)
    return w


# -------------------------------------------------------------------------------------- wizard


class DatastoreWizard(QWizard):
    """``DatastoreWizard(model_spec, sources=[...])``; ``datastore_built(path, use_now)`` on Finish.

    ``sources``: specs (``chat:PATH``, ``code:DIR``, ``text:PATH``, ``jsonl:PATH#field``,
    ``table:PATH#field``) or Source objects to start with. ``tokenizer_loader(model_spec)`` and
    ``builder`` (:func:`build_datastore`'s signature) can be replaced; ``out_dir`` defaults to
    ``datastores_dir()``. ``model``: the loaded model (a transformers causal LM with the
    tokenizer's vocabulary); with it the sources page offers its own answers, generated by
    ``distiller`` (:func:`distill`'s signature) for prompts from ``distill_prompts`` (a
    ``chat:FILE`` spec; default ShareGPT's).
    """

    datastore_built = Signal(str, bool)

    SOURCES, OPTIONS, BUILD, SUMMARY = range(4)

    def __init__(self, model_spec: str = DEFAULT_MODEL, *, sources: Iterable[str | Source] = (),
                 tokenizer_loader: Callable = load_tokenizer, builder: Callable = build_datastore,
                 out_dir: Path | None = None, model=None, distiller: Callable = distill,
                 distill_prompts: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model_spec = model_spec
        self._loader, self._builder = tokenizer_loader, builder
        self._model, self._distiller, self._distill_prompts = model, distiller, distill_prompts
        self._distill_report: DistillReport | None = None
        self._out_dir = Path(out_dir) if out_dir is not None else None
        self._tokenizer = None
        self._report: BuildReport | None = None
        self._result: Path | None = None
        self._worker: _JobWorker | None = None
        self._thread: WorkerThread | None = None
        self._cancel: CancelToken | None = None
        self._building = False
        self._cancelled = False
        self._closed = False
        self.finished_despite_cancel = False
        self._job_holder: dict = {}
        self._poll = QTimer(self, interval=int(POLL_INTERVAL_S * 1000))
        self._poll.timeout.connect(self._poll_job)

        self.setObjectName("datastoreWizard")
        self.setWindowTitle("New datastore")
        self.setWizardStyle(QWizard.WizardStyle.ClassicStyle)
        self.setOption(QWizard.WizardOption.NoCancelButtonOnLastPage, True)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage, True)
        self.setButtonText(QWizard.WizardButton.CancelButton, "Close")
        self.sources_page = SourcesPage(self)
        self.options_page = OptionsPage(self)
        self.build_page = BuildPage(self)
        self.summary_page = SummaryPage(self)
        for pid, page in enumerate((self.sources_page, self.options_page, self.build_page, self.summary_page)):
            self.setPage(pid, page)
        for spec in sources:
            self.sources_page.add(spec)
        self.resize(780, 600)

    # --- public API ------------------------------------------------------------------------------

    def add_source(self, spec: str | Source, text_field: str | None = None) -> bool:
        """Add a source (``KIND:PATH``, ``jsonl:PATH#field``, or a Source); False if it is unusable."""
        return self.sources_page.add(spec, text_field)

    def sources(self) -> list[Source]:
        return self.sources_page.sources()

    def out_dir(self) -> Path:
        return self._out_dir if self._out_dir is not None else datastores_dir()

    def output_path(self) -> Path | None:
        return self.options_page.output_path()

    def build_report(self) -> BuildReport | None:
        """The report of the finished build (None before)."""
        return self._report

    def distill_report(self) -> DistillReport | None:
        """The report of the finished build when it was of the model's own answers (else None)."""
        return self._distill_report

    def can_distill(self) -> bool:
        """Whether the model is here to answer prompts (its own style is offered on the sources page)."""
        return self._model is not None

    def distilling(self) -> bool:
        return self.sources_page.distilling()

    def result_path(self) -> Path | None:
        """The built index (None until a build succeeded)."""
        return self._result

    def use_now(self) -> bool:
        return self._result is not None and self.summary_page.use_now_check.isChecked()

    def is_building(self) -> bool:
        return self._building

    # --- building --------------------------------------------------------------------------------

    def start_build(self) -> None:
        if self._building or self._closed or self.currentId() != self.BUILD:
            return
        out = self.output_path()
        if out is None:
            return
        token = CancelToken()
        holder: dict = {}
        job = self._distill_job(out, token, holder) if self.distilling() else self._build_job(out, token, holder)
        self._job_holder = holder
        if self._thread is None:
            self._worker = _JobWorker()
            self._thread = WorkerThread(self._worker)
        self._building, self._cancelled, self._cancel = True, False, token
        self.finished_despite_cancel = False
        self._report = self._result = self._distill_report = None
        self.build_page.show_running()
        self._lock_back(True)
        self._worker.take()  # nothing left over from an earlier build
        self._worker.job = job
        QMetaObject.invokeMethod(self._worker, "run", Qt.ConnectionType.QueuedConnection)
        self._poll.start()

    def _tokenizer_step(self, token: CancelToken, holder: dict) -> Callable:
        """The job's first step: the tokenizer, loaded once (kept in ``holder`` for the next build)."""
        loader, spec, cached = self._loader, self.model_spec, self._tokenizer

        def tokenizer(status):
            loaded = cached
            if loaded is None:
                status(f"Loading {model_display_name(spec)}'s tokenizer …")
                loaded = holder["tokenizer"] = loader(spec)
            if token.cancelled:
                raise BuildCancelled("datastore build cancelled; nothing was written")
            return loaded

        return tokenizer

    def _build_job(self, out: Path, token: CancelToken, holder: dict) -> Callable:
        sources = [Source(s.kind, s.path, s.options) for s in self.sources()]  # fresh read counters
        options = self.options_page.build_options()
        builder, spec = self._builder, self.model_spec
        get_tokenizer = self._tokenizer_step(token, holder)

        def job(report, status):
            tokenizer = get_tokenizer(status)
            status("Reading the sources …")
            return builder(sources, tokenizer, out, model=spec, options=options, progress=report, cancel=token)

        return job

    def _distill_job(self, out: Path, token: CancelToken, holder: dict) -> Callable:
        """The model answers the prompts (on the worker thread), then the answers are indexed."""
        model, distiller, prompts_spec = self._model, self._distiller, self._distill_prompts
        count = self.sources_page.distill_count.value()
        name = model_display_name(self.model_spec)
        get_tokenizer = self._tokenizer_step(token, holder)

        def job(report, status):
            tokenizer = get_tokenizer(status)
            status("Reading the prompts …" if prompts_spec
                   else "Reading the ShareGPT prompts (fetched first if needed) …")
            prompts = read_prompts(prompts_spec, limit=count)
            if token.cancelled:
                raise BuildCancelled("datastore build cancelled; nothing was written")
            status(f"{name} is answering {len(prompts):,} prompts …")
            return distiller(model, tokenizer, prompts, out, progress=report, cancel=token, model_name=name)

        return job

    def cancel_build(self) -> None:
        if self._building and self._cancel is not None and not self._cancelled:
            self._cancelled = True
            self._cancel.cancel()
            self.build_page.show_cancelling()

    def _poll_job(self) -> None:
        if self._worker is None:
            return
        progress, status, outcome = self._worker.take()
        if not self._cancelled:
            if status is not None:
                self.build_page.show_phase(status.strip().rstrip("."))
            if isinstance(progress, Progress):
                self.build_page.show_progress(progress)
            elif isinstance(progress, DistillProgress):
                self.build_page.show_distill_progress(progress)
        if outcome is not None:
            self._poll.stop()
            what, value = outcome
            if "tokenizer" in self._job_holder:
                self._tokenizer = self._job_holder["tokenizer"]
            self._building, self._cancel = False, None
            if self._closed:
                return
            self._lock_back(False)
            (self._on_built if what == "done" else self._on_failed)(value)

    def _on_built(self, report: BuildReport | DistillReport) -> None:
        self.finished_despite_cancel = self._cancelled
        if isinstance(report, DistillReport):
            self._distill_report, report = report, report.build
        self._report, self._result = report, Path(report.path)
        self.build_page.completeChanged.emit()
        self.next()

    def _on_failed(self, exc: BaseException) -> None:
        page = self.build_page
        if (self._cancelled or isinstance(exc, BuildCancelled)) and self.distilling():
            page.show_idle("Build cancelled; the datastore was not written. The answers so far are kept: build again "
                           "to continue from them, or go back to change something.", error="")
            return
        if self._cancelled or isinstance(exc, BuildCancelled):
            page.show_idle("Build cancelled; nothing was written"
                           + (" and the existing datastore is as it was." if (self.output_path() or Path()).is_file()
                              else ".") + " Go back to change something, or build again.", error="")
            return
        if isinstance(exc, DatastoreError):
            message = str(exc)
            for source in self.sources():
                if message.startswith(source.spec + ":"):
                    text = f"The build stopped: {without_spec(source, message)}"
                    self._back_to_sources()
                    self.sources_page.mark_bad(source.spec, text)
                    return
        folder = self.output_path().parent if self.output_path() else None
        what = ("The tokenizer could not be loaded." if isinstance(exc, ModelNotFoundError)
                else "The datastore could not be built.")
        page.show_idle("", error=f"{what}\n{describe_error(exc, folder)}", again="Retry")

    def _back_to_sources(self) -> None:
        while self.currentId() > self.SOURCES:
            before = self.currentId()
            self.back()
            if self.currentId() == before:
                break

    def _lock_back(self, locked: bool) -> None:
        """While building, Back is off: the page before the build page acts as a commit page."""
        self.options_page.setCommitPage(locked)
        self.build_page.completeChanged.emit()  # makes QWizard update its buttons

    # --- finishing and closing -------------------------------------------------------------------

    def accept(self) -> None:
        if self._result is not None:
            self.datastore_built.emit(str(self._result), self.use_now())
        super().accept()

    def reject(self) -> None:
        self.cancel_build()  # the pipeline removes its temp files as it stops
        super().reject()

    def done(self, result: int) -> None:
        self._closed = True
        self._poll.stop()
        super().done(result)
        if self._thread is not None:
            end_job_thread(self._thread)
            self._thread = None
