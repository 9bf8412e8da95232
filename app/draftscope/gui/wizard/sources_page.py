"""The datastore wizard's first page (``sourcesPage``): what the datastore holds.

Chat logs (ShareGPT / OpenAI JSON or JSONL), code folders, text files and JSONL files (with the
field holding the text). Each source is checked when it is added by reading its first few records
(a bounded read: never a whole big file) and the preview pane shows them; a bad source is named in
``sourcesError`` and the page cannot be left. With the loaded model at hand, the page offers its
own answers to ShareGPT prompts instead of files ("learn its style").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QStyle,
    QVBoxLayout,
    QWidget,
    QWizard,
    QWizardPage,
)

from draftscope import optional_torch
from draftscope.datastore.preview import (
    DISTILL_PROMPTS,
    KIND_LABELS,
    SourcePreview,
    parse_source,
    preview_source,
    source_name,
)
from draftscope.datastore.sources import DatastoreError, Source
from draftscope.gui.dialogs.torch_install import offer_install
from draftscope.gui.form_widgets import note as _note
from draftscope.gui.form_widgets import show_error
from draftscope.gui.form_widgets import wrapping_label as _wrapping_label
from draftscope.gui.wizard.build_jobs import DISTILLING


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
    def __init__(self, wizard: QWizard) -> None:  # the DatastoreWizard (gui/wizard/wizard.py)
        super().__init__()
        self._wiz = wizard
        self.entries: list[_Entry] = []
        self.setObjectName("sourcesPage")
        self.setTitle("What should the datastore hold?")
        self.setSubTitle(
            "Drafts come from text like what you will ask about: add chat logs, code or documents. "
            "Each source is checked as it is added."
        )

        splitter = self._build_files_box()
        error_row = self._build_error_row()
        self._files_box = splitter

        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addLayout(error_row)
        layout.addWidget(self._distill_box())
        self._update()

    def _build_files_box(self) -> QSplitter:
        """The sources with their buttons over the preview of the one selected."""
        top = self._build_source_list()
        preview_box = self._build_preview()
        splitter = QSplitter(Qt.Orientation.Vertical, objectName="sourcesSplitter")
        splitter.addWidget(top)
        splitter.addWidget(preview_box)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([150, 250])
        return splitter

    def _build_source_list(self) -> QWidget:
        self.source_list = QListWidget(objectName="sourceList")
        self.source_list.currentRowChanged.connect(self._show_preview)
        buttons = self._build_source_buttons()
        top = QWidget()
        top_row = QHBoxLayout(top)
        top_row.setContentsMargins(0, 0, 0, 0)
        top_row.addWidget(self.source_list, 1)
        top_row.addLayout(buttons)
        return top

    def _build_source_buttons(self) -> QVBoxLayout:
        """A button per kind of source to add, then Remove."""
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
        return buttons

    def _build_preview(self) -> QWidget:
        self.preview = QPlainTextEdit(objectName="sourcePreview")
        self.preview.setReadOnly(True)
        self.preview.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.preview.setPlaceholderText("Add a source to see what will be read from it.")
        preview_box = QWidget()
        preview_layout = QVBoxLayout(preview_box)
        preview_layout.setContentsMargins(0, 4, 0, 0)
        preview_layout.addWidget(QLabel("Preview"))
        preview_layout.addWidget(self.preview, 1)
        return preview_box

    def _build_error_row(self) -> QHBoxLayout:
        """The bad source named, with Check again beside it."""
        self.error_label = _wrapping_label(objectName="sourcesError")
        show_error(self.error_label)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.recheck_button = QPushButton("Check again", objectName="recheckSourcesButton")
        self.recheck_button.setAutoDefault(False)
        self.recheck_button.setToolTip("Read the sources again (after fixing or replacing a file)")
        self.recheck_button.clicked.connect(self.recheck)
        error_row = QHBoxLayout()
        error_row.addWidget(self.error_label, 1)
        error_row.addWidget(self.recheck_button, 0, Qt.AlignmentFlag.AlignTop)
        return error_row

    def _distill_box(self) -> QWidget:
        """ "Learn the model's own style": its answers to ShareGPT prompts instead of files (shown
        only when the wizard has the loaded model to answer with)."""
        self.distill_check = QCheckBox("Learn the model's own style: its answers to", objectName="distillCheck")
        self.distill_check.toggled.connect(self._on_distill_toggled)
        self.distill_count = QSpinBox(objectName="distillPromptsSpin")
        self.distill_count.setRange(1, 100_000)
        self.distill_count.setValue(DISTILL_PROMPTS)
        self.distill_count.setSuffix(" ShareGPT prompts")
        self.distill_count.setGroupSeparatorShown(True)
        self.distill_count.setEnabled(False)
        note = _note(
            "Instead of files: the model answers these questions and the datastore holds its answers, so "
            "drafts sound like the model and more of them are accepted. The model writes every answer, which "
            "takes a while; a cancelled build keeps the answers and the next one continues from them."
            + (
                " The model runs on llama.cpp here, which cannot batch answers: the build loads it a second "
                "time, with torch, for this (more memory while it runs)."
                if self._wiz.loads_a_model()
                else ""
            )
        )
        note.setObjectName("distillNote")
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
        if self._wiz.loads_a_model() and not optional_torch.torch_available():
            self._offer_torch(row, column)
        box.setVisible(self._wiz.can_distill())
        return box

    def _offer_torch(self, row: QHBoxLayout, column: QVBoxLayout) -> None:
        """Learning the style loads the model with torch, which is not installed: the box says so and
        offers to install it; the choice opens once it can be used."""
        self.distill_check.setEnabled(False)
        button = QPushButton("Install PyTorch…", objectName="distillInstallTorchButton")
        button.setAutoDefault(False)
        row.insertWidget(row.count() - 1, button)
        missing = _wrapping_label(
            f"{DISTILLING} needs PyTorch, which is not installed here ({optional_torch.install_plan().size_words}).",
            objectName="distillTorchMissing",
        )
        column.addWidget(missing)

        def installed(now: bool) -> None:
            button.hide()
            self.distill_check.setEnabled(now)
            missing.setText("PyTorch installed." if now else "PyTorch installed: restart Draftscope to use it here.")

        button.clicked.connect(lambda: offer_install(self.wizard(), DISTILLING).installed.connect(installed))

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
        icon = (
            QStyle.StandardPixmap.SP_MessageBoxWarning
            if entry.error
            else (QStyle.StandardPixmap.SP_DirIcon if src.path.is_dir() else QStyle.StandardPixmap.SP_FileIcon)
        )
        entry.item.setIcon(style.standardIcon(icon))

    def _show_preview(self, row: int) -> None:
        if not 0 <= row < len(self.entries):
            self.preview.clear()
            return
        entry = self.entries[row]
        if entry.error:
            self.preview.setPlainText(
                f"Cannot be used:\n{entry.error}"
                + (f"\n\n{entry.preview.text}" if entry.preview.text and entry.build_error else "")
            )
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

    def isComplete(self) -> bool:  # Qt's name
        if self.distilling():
            return True
        return bool(self.entries) and all(e.error is None for e in self.entries)

    def cleanupPage(self) -> None:  # keep the sources when going back
        pass

    def sources(self) -> list[Source]:
        return [e.source for e in self.entries]

    # --- file dialogs ----------------------------------------------------------------------------

    def _ask_chat(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self, "Add chat logs", str(Path.home()), "Chat logs (*.json *.jsonl);;All files (*)"
        )
        for path in paths:
            self.add(f"chat:{path}")

    def _ask_code(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Add a code folder", str(Path.home()))
        if path:
            self.add(f"code:{path}")

    def _ask_text(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self,
            "Add text files",
            str(Path.home()),
            "Text and code (*.txt *.md *.markdown *.rst *.text *.py *.c *.h *.cpp *.rs "
            "*.js *.ts *.java *.go *.sh *.html *.json *.toml *.yaml *.yml);;"
            "All files (*)",
        )
        for path in paths:
            self.add(f"text:{path}")

    def _ask_jsonl(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Add a JSONL file", str(Path.home()), "JSON Lines (*.jsonl *.ndjson);;All files (*)"
        )
        if not path:
            return
        name, ok = QInputDialog.getText(
            self,
            "Field holding the text",
            "Which field of each record holds the text? (a dotted path such as data.body is fine)",
            QLineEdit.EchoMode.Normal,
            "text",
        )
        if ok and name.strip():
            self.add(f"jsonl:{path}", name.strip())
