"""The datastore wizard's pages after the sources: choices, the build, what was built.

* **Options** (``optionsPage``): the tokenizer (the current model's, read-only), assistant turns
  only, dedupe, a size limit and the output name (a file under the wizard's folder; an existing
  one is replaced only when the user ticks "Replace it").
* **Build** (``buildPage``): the build's progress, phase, rate and time left, and Cancel; after a
  cancel or a failure, what happened and Build again / Retry. The wizard runs the job; this page
  shows it.
* **Summary** (``summaryPage``): what went in and what was skipped, and "Use this datastore now".
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
    QWizard,
    QWizardPage,
)

from draftscope.core.words import eta_text as _eta
from draftscope.datastore.distill import DistillProgress
from draftscope.datastore.pipeline import BuildOptions
from draftscope.datastore.preview import (
    distill_name,
    duration_words,
    model_display_name,
    output_file_name,
    short_location,
    size_words,
    suggested_name,
)
from draftscope.datastore.progress import Progress
from draftscope.gui.form_widgets import note as _note
from draftscope.gui.form_widgets import progress_row as _progress_row
from draftscope.gui.form_widgets import show_error
from draftscope.gui.form_widgets import wrapping_label as _wrapping_label
from draftscope.gui.jobs import PROGRESS_STEPS as _STEPS


class OptionsPage(QWizardPage):
    def __init__(self, wizard: QWizard) -> None:  # the DatastoreWizard (gui/wizard/wizard.py)
        super().__init__()
        self._wiz = wizard
        self._name_edited = False
        self.setObjectName("optionsPage")
        self.setTitle("Options")
        self.setSubTitle("The datastore is tokenised with the current model's tokenizer: it helps that model only.")
        self.setButtonText(QWizard.WizardButton.NextButton, "Build")
        self.setButtonText(QWizard.WizardButton.CommitButton, "Build")
        self._build_source_fields()
        self._build_output_fields()
        form = self._build_form()
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addStretch(1)

    def _build_source_fields(self) -> None:
        """What is read: the tokenizer (read-only), chat logs' assistant turns, duplicates, the size limit."""
        self.tokenizer_field = QLineEdit(objectName="tokenizerName")
        self.tokenizer_field.setReadOnly(True)
        self.tokenizer_field.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.assistant_check = QCheckBox("Assistant turns only", objectName="assistantOnlyCheck")
        self.assistant_check.setChecked(True)
        self.assistant_note = _note(
            "Keep only what the assistant said: the text the model itself writes "
            "(recommended). Off: whole conversations."
        )
        self.dedupe_check = QCheckBox("Skip duplicate documents", objectName="dedupeCheck")
        self.max_tokens = QSpinBox(objectName="maxTokensSpin")
        self.max_tokens.setRange(0, 2_000_000_000)
        self.max_tokens.setSingleStep(1_000_000)
        self.max_tokens.setSpecialValueText("no limit")
        self.max_tokens.setSuffix(" tokens")
        self.max_tokens.setGroupSeparatorShown(True)
        self.max_tokens.setMinimumWidth(200)
        self.size_note = _note(
            "Stop reading once the datastore holds this many tokens (0: no limit). "
            "An index takes about 8 bytes per token."
        )

    def _build_output_fields(self) -> None:
        """Where it goes: the name, the file it makes, and "Replace it" when that file exists."""
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

    def _build_form(self) -> QFormLayout:
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        form.addRow("Tokenizer:", self.tokenizer_field)
        form.addRow("Chat logs:", self.assistant_check)
        form.addRow("", self.assistant_note)
        form.addRow("Duplicates:", self.dedupe_check)
        form.addRow("Size limit:", _left(self.max_tokens))
        form.addRow("", self.size_note)
        form.addRow(_spacer(8))
        form.addRow("Name:", self.name_edit)
        form.addRow("", self.path_label)
        self.exists_box = self._build_exists_box()
        form.addRow("", self.exists_box)
        return form

    def _build_exists_box(self) -> QWidget:
        """The "a file of that name exists" note with its "Replace it" box, top-aligned beside it."""
        exists_row = QHBoxLayout()
        exists_row.setContentsMargins(0, 0, 0, 0)
        exists_row.addWidget(self.exists_label, 1)
        exists_row.addWidget(self.replace_check, 0, Qt.AlignmentFlag.AlignTop)
        box = QWidget()
        box.setLayout(exists_row)
        return box

    def initializePage(self) -> None:
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

    def cleanupPage(self) -> None:  # keep the choices when going back
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
            exists = (
                "Give the datastore a name (letters, digits, spaces, - and _; no slashes)."
                if self.name_edit.text().strip()
                else "Give the datastore a name."
            )
        else:
            self.path_label.setText(f"Saved as {path}")
            if path.is_dir():
                exists = f"A folder named {path.name} is in the way; choose another name."
            elif path.exists():
                exists = f"A datastore named {path.name} already exists."
        self.exists_label.setText(exists)
        show_error(self.exists_label, exists)
        self.exists_box.setVisible(bool(exists))
        self.replace_check.setVisible(path is not None and path.is_file())
        self.completeChanged.emit()

    def isComplete(self) -> bool:
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
    CANCEL_NOTE = (
        "Cancel stops the build without writing anything: an older datastore of the same name stays as it was."
    )
    DISTILL_CANCEL_NOTE = (
        "Cancel stops the build without writing the datastore; the answers so far are kept and "
        "building again continues from them."
    )

    def __init__(self, wizard: QWizard) -> None:  # the DatastoreWizard (gui/wizard/wizard.py)
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
        for text, label in (
            ("Phase:", self.phase_label),
            ("Read:", self.read_label),
            ("Tokens:", self.tokens_label),
            ("Speed:", self.rate_label),
            ("Time left:", self.eta_label),
        ):
            form.addRow(text, label)
        self._stats_form = form

        self.cancel_note = _note(self.CANCEL_NOTE)
        self.status_label = _wrapping_label(objectName="buildStatus")
        self.error_label = _wrapping_label(objectName="buildError")
        show_error(self.error_label)
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

    def initializePage(self) -> None:
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

    def cleanupPage(self) -> None:
        self.show_idle("", error="")

    def isComplete(self) -> bool:
        return self._wiz.build_report() is not None and not self._wiz.is_building()

    # --- states ----------------------------------------------------------------------------------

    def show_running(self) -> None:
        # one bar from 0 over the whole build, the tokenizer's loading included (the phase names it):
        # a busy bar drew full while the tokenizer loaded, then dropped back when reading began
        self.progress.setRange(0, _STEPS)
        self.progress.setValue(0)
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
        """Reading and indexing as one bar, weighted by their time; the time left counts both."""
        if p.phase == "reading":
            self.phase_label.setText("Reading and tokenising the sources")
        else:
            self._show_last_phases(p.phase, "Indexing (sorting suffixes) …")
        self._advance(p.overall)
        if p.phase != "done":
            self.eta_label.setText("–" if p.eta_seconds is None else (_eta(p.eta_seconds) or "less than a second"))
        total = f" of {size_words(p.bytes_total)}" if p.bytes_total else ""
        self.read_label.setText(f"{size_words(p.bytes_read)}{total} · {p.items:,} records")
        self.tokens_label.setText(f"{p.tokens:,}")
        self.rate_label.setText(f"{p.tokens_per_second:,.0f} tokens/s")

    def _advance(self, share: float | None) -> None:
        """Move the bar on to ``share`` of the build; never back (an estimate that grows holds it)."""
        if share is not None:
            self.progress.setValue(max(self.progress.value(), int(_STEPS * share)))

    def _show_last_phases(self, phase: str, indexing: str) -> None:
        """Indexing (the bar waits where reading left it) or done, in either kind of build."""
        self.phase_label.setText(indexing if phase == "indexing" else "Done")
        if phase != "indexing":
            self.progress.setValue(_STEPS)
        self.eta_label.setText("–")

    def show_distill_progress(self, p: DistillProgress) -> None:
        if p.phase == "generating":
            self.phase_label.setText("The model is answering the prompts")
            self._advance(p.fraction)
            self.eta_label.setText("–" if p.eta_seconds is None else (_eta(p.eta_seconds) or "less than a second"))
        else:
            self._show_last_phases(p.phase, "Indexing the answers …")
        self.read_label.setText(f"{p.answers:,} of {p.total:,}")
        self.tokens_label.setText(f"{p.tokens:,} generated")
        self.rate_label.setText(f"{p.tokens_per_second:,.1f} tokens/s")


def use_now_words(model: str) -> str:
    """The "use it now" choice, saying its scope: the models that read its token ids as text."""
    return f"Use this datastore now, for {model} and the models that share its tokenizer (others keep their own)"


class SummaryPage(QWizardPage):
    def __init__(self, wizard: QWizard) -> None:  # the DatastoreWizard (gui/wizard/wizard.py)
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
        self.use_now_check = QCheckBox(use_now_words("this model"), objectName="useNowCheck")
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

    def initializePage(self) -> None:
        report = self._wiz.build_report()
        if report is None:
            return
        name = model_display_name(self._wiz.model_spec)
        self.setSubTitle(f"{name} can draft from it as soon as it is in use.")
        self.use_now_check.setText(use_now_words(name))
        self.use_now_check.setToolTip(
            "Its token ids mean the same text only to models with this tokenizer: a model with "
            "another keeps its own default datastore, and the status bar says so"
        )
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
            notes.append(
                f"{distilled.answers:,} answers of the model ({distilled.generated:,} written now"
                + (f" at {distilled.tokens_per_second:,.1f} tokens/s" if distilled.generated else "")
                + f"), kept in {distilled.answers_path.name}."
            )
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
