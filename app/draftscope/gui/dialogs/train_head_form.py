"""The train-head dialog's form, as a mixin of ``TrainHeadDialog``: its widgets (what training
does, the training data and its file, the token budget with the time it would take, the progress
bar, the messages, the buttons) and what the form says is chosen (the data as a training spec,
the TrainOptions fields). Split from ``train_head`` so that module keeps the run: starting,
progress, cancelling with a checkpoint, the outcome."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from draftscope.datastore.default import datastores_dir
from draftscope.datastore.distill import answers_path_for
from draftscope.datastore.preview import distill_name, output_file_name
from draftscope.gui.form_widgets import note as _note
from draftscope.gui.form_widgets import progress_row as _progress_row
from draftscope.gui.form_widgets import show_error
from draftscope.gui.form_widgets import wrapping_label as _wrapping_label

DEFAULT_TOKENS = 200_000
# (combo text, kind): the ShareGPT corpus, or a file the user picks
DATA_CHOICES = (
    ("ShareGPT conversations (downloaded the first time)", "sharegpt"),
    ("A chat file (ShareGPT or OpenAI JSON / JSONL)", "chat"),
    ("Distilled answers (the model's own, from the datastore wizard)", "answers"),
)


def _minutes(seconds: float) -> str:
    return "less than a minute" if seconds < 60 else f"about {seconds / 60:,.0f} minute{'s' if seconds >= 90 else ''}"


class TrainHeadForm:
    """The form's widgets and choices, mixed into ``TrainHeadDialog`` (a QDialog): it calls back the
    dialog's ``start``, ``cancel`` and ``reject``, and reads its ``engine``, ``model_spec`` and ``_rate``."""

    # --- building the form ---------------------------------------------------------------------

    def _build_intro(self) -> QWidget:
        """What training does (returned), and the model's head so far (``self.existing``)."""
        intro = _wrapping_label(
            f"A small head learns to predict what {self.engine.name} writes a few tokens ahead, from the model's own "
            "hidden states, so more of its drafts are accepted. It is trained on the model's own predictions over "
            "the data below, with the loaded model; chatting waits until training is done."
        )
        self.existing = _note("")
        self.existing.setObjectName("trainExisting")
        return intro

    def _build_choices(self) -> QWidget:
        """The form: the training data (the file's row shown for a file) and the token budget."""
        self.data_combo = QComboBox(objectName="trainData")
        for text, kind in DATA_CHOICES:
            self.data_combo.addItem(text, kind)
        self.path_row = self._build_path_row()
        self.data_combo.currentIndexChanged.connect(self._on_data_changed)
        tokens_row = self._build_tokens_row()

        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        form.addRow("Training data:", self.data_combo)
        form.addRow("", self.path_row)
        form.addRow("Tokens:", tokens_row)
        choices = QWidget()
        choices.setLayout(form)
        form.setContentsMargins(0, 0, 0, 0)
        return choices

    def _build_path_row(self) -> QWidget:
        self.path_edit = QLineEdit(objectName="trainDataPath")
        self.browse_button = QPushButton("Browse…", objectName="trainBrowse")
        self.browse_button.setAutoDefault(False)
        self.browse_button.clicked.connect(self._browse)
        row = QWidget()
        path_layout = QHBoxLayout(row)
        path_layout.setContentsMargins(0, 0, 0, 0)
        path_layout.addWidget(self.path_edit, 1)
        path_layout.addWidget(self.browse_button)
        return row

    def _build_tokens_row(self) -> QWidget:
        """The token budget, with the time it would take at the measured rate beside it."""
        self.tokens_spin = QSpinBox(objectName="trainTokens")
        self.tokens_spin.setRange(1_000, 100_000_000)
        self.tokens_spin.setSingleStep(50_000)
        self.tokens_spin.setGroupSeparatorShown(True)
        self.tokens_spin.setValue(DEFAULT_TOKENS)
        self.tokens_spin.setMinimumWidth(130)
        self.tokens_spin.setToolTip("Training positions the head sees; more takes longer and usually drafts better")
        self.tokens_spin.valueChanged.connect(self._update_estimate)
        self.estimate = _note("")
        self.estimate.setObjectName("trainEstimate")
        self.estimate.setWordWrap(False)
        row = QWidget()
        tokens_layout = QHBoxLayout(row)
        tokens_layout.setContentsMargins(0, 0, 0, 0)
        tokens_layout.addWidget(self.tokens_spin)
        tokens_layout.addWidget(self.estimate, 1)
        return row

    def _build_progress_row(self) -> QWidget:
        self.progress = QProgressBar(objectName="trainProgress")
        self.cancel_button = QPushButton("Cancel", objectName="trainCancel")
        self.cancel_button.setAutoDefault(False)
        self.cancel_button.setToolTip("Stop training; a checkpoint is kept and Start resumes from it")
        self.cancel_button.clicked.connect(self.cancel)
        return _progress_row(self.progress, self.cancel_button)

    def _build_messages(self) -> None:
        """The run's status line, the summary of a finished run, and the error of a failed one."""
        self.status = _wrapping_label(objectName="trainStatus")
        self.summary = _wrapping_label(objectName="trainSummary")
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error = _wrapping_label(objectName="trainError")
        show_error(self.error)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def _build_buttons(self) -> QHBoxLayout:
        self.start_button = QPushButton("Start", objectName="trainStart")
        self.start_button.clicked.connect(self.start)
        self.close_button = QPushButton("Close", objectName="trainClose")
        self.close_button.setAutoDefault(False)
        self.close_button.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.close_button)
        return buttons

    def _lay_out(self, intro: QWidget, buttons: QHBoxLayout) -> None:
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.existing)
        layout.addSpacing(6)
        layout.addWidget(self.choices)
        layout.addSpacing(6)
        layout.addWidget(self.progress_row)
        layout.addWidget(self.status)
        layout.addWidget(self.summary)
        layout.addWidget(self.error)
        layout.addStretch(1)
        layout.addLayout(buttons)

    # --- choices -------------------------------------------------------------------------------

    def data_spec(self) -> str | None:
        """The chosen data as a training spec (None: the ShareGPT corpus, fetched when training starts)."""
        kind = self.data_combo.currentData()
        if kind == "sharegpt":
            return None
        return f"{kind}:{Path(self.path_edit.text().strip()).expanduser()}"

    def option_fields(self) -> dict:
        """TrainOptions fields besides the data, as the form shows them (read on the UI thread)."""
        return {"tokens": self.tokens_spin.value(), **self._overrides}

    def _on_data_changed(self) -> None:
        kind = self.data_combo.currentData()
        self.path_row.setVisible(kind != "sharegpt")
        self.path_edit.setPlaceholderText("a .answers.jsonl file" if kind == "answers" else "a .json or .jsonl file")
        if kind == "answers" and not self.path_edit.text().strip():
            answers = answers_path_for(datastores_dir() / output_file_name(distill_name(self.model_spec)))
            if answers.is_file():
                self.path_edit.setText(str(answers))

    def _browse(self) -> None:
        kind = self.data_combo.currentData()
        start = self.path_edit.text().strip() or (str(datastores_dir()) if kind == "answers" else str(Path.home()))
        filters = (
            "Distilled answers (*.answers.jsonl);;JSONL (*.jsonl);;All files (*)"
            if kind == "answers"
            else "Chat logs (*.json *.jsonl);;All files (*)"
        )
        path, _ = QFileDialog.getOpenFileName(self, "Training data", start, filters)
        if path:
            self.path_edit.setText(path)

    def _update_estimate(self) -> None:
        if not self._rate:
            self.estimate.setText("")
            return
        self.estimate.setText(f"{_minutes(self.tokens_spin.value() / self._rate)} at {self._rate:,.0f} tokens/s")
