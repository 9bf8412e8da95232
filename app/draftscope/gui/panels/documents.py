"""The conversation's documents: a folder whose files its answers search (documents/folder.py).
Add folder… indexes it in the background with progress; while the panel lives, the folder is looked
at again every few seconds (a changed file read again, a removed one forgotten). The folder belongs to
the conversation (kept in the history): opening another conversation shows its own, a new one none
until chosen. The session hears of it (``session.documents``), so each message sends the passages
that best answer it; a message sent while the folder is first indexed waits for it (``holds_send``)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from draftscope import paths
from draftscope.documents.folder import FolderIndex, index_path_for, said_skipped
from draftscope.gui.jobs import JobRunner

RECHECK_MS = 5000  # how often the folder is looked at again for changed files
_SEND_WAITS = " — Send once it is searchable"  # a message sent meanwhile waits for the first indexing


class DocumentsPanel(QWidget):
    said = Signal(str)  # a short report for the status bar

    def __init__(self, session, history, parent: QWidget | None = None) -> None:
        super().__init__(parent, objectName="documentsPanel")
        self.session, self.history = session, history
        self.index = None  # the folder's FolderIndex
        self.folder: str | None = None
        self.label = QLabel(
            "No documents for this conversation. Add a folder: each message then sends the "
            "passages of its files that best answer it.",
            objectName="documentsLabel",
            wordWrap=True,
        )
        self.status = QLabel("", objectName="documentsStatus", wordWrap=True)
        self.bar = QProgressBar(objectName="documentsProgress", visible=False)
        self.add_button = QPushButton("Add folder…", objectName="addDocumentsButton")
        self.add_button.clicked.connect(self.choose_folder)
        self.remove_button = QPushButton("Remove", objectName="removeDocumentsButton", enabled=False)
        self.remove_button.clicked.connect(lambda: self.set_folder(None))
        layout = QVBoxLayout(self)
        # one under the other: side by side they made the dock, with the inspection panels, wider than a
        # 1280-pixel screen
        for part in (self.label, self.bar, self.status, self.add_button, self.remove_button):
            layout.addWidget(part)
        layout.addStretch(1)
        self.jobs = JobRunner(self, on_progress=self._on_progress, on_done=self._on_indexed, on_failed=self._on_failed)
        self.recheck = QTimer(self, interval=RECHECK_MS)
        self.recheck.timeout.connect(lambda: self._refresh(quiet=True))

    def close_jobs(self) -> None:
        """The window is closing: no more looks at the folder; an indexing under way stops."""
        self.recheck.stop()
        self.jobs.close()

    def choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A folder of documents for this conversation")
        if folder:
            self.set_folder(folder)

    def show_conversation(self, conversation_id: int | None) -> None:
        """Another conversation is open: its own folder (kept in the history), or none."""
        folder = self.history.documents(conversation_id) if conversation_id is not None else None
        if folder != self.folder:
            self._open(folder)

    def holds_send(self) -> bool:
        """Whether a message must wait: the folder is being indexed for the first time, so its
        passages could not go with the message (and it says so). Rechecks of a folder already
        indexed never hold one: the index searches what it has meanwhile."""
        if self.index is None or self.session.documents is self.index or not self.jobs.running:
            return False
        self.status.setText(self.status.text().split(_SEND_WAITS)[0] + _SEND_WAITS)
        self.said.emit("The documents folder is being indexed: Send once it is searchable")
        return True

    def conversation_started(self, conversation_id: int | None) -> None:
        """A new conversation was written (its first message): it keeps the folder chosen for it."""
        if conversation_id is not None and self.folder and self.history.documents(conversation_id) != self.folder:
            self.history.set_documents(conversation_id, self.folder)

    def set_folder(self, folder: str | None) -> None:
        if self.session.conversation_id is not None:
            self.history.set_documents(self.session.conversation_id, folder)
        self._open(folder)

    def _open(self, folder: str | None) -> None:
        self.jobs.cancel()
        self.recheck.stop()
        if self.index is not None:
            self.session.documents = None
            self.index = None
        self.folder = folder
        self.remove_button.setEnabled(folder is not None)
        if folder is None:
            self.label.setText("No documents for this conversation.")
            self.status.setText("")
            return
        try:
            self.index = FolderIndex(folder, index_path_for(Path(folder), paths.data_dir()))
        except (ValueError, OSError) as exc:  # a folder gone since it was chosen
            self.label.setText(f"The documents folder {folder} cannot be opened: {exc}")
            return
        self.label.setText(f"Documents: {folder}")
        self._refresh(quiet=False)

    def _refresh(self, *, quiet: bool) -> None:
        index = self.index
        if index is None or self.jobs.running:
            return
        self.bar.setVisible(not quiet)
        self.jobs.start(
            lambda report, status, cancel: index.refresh(
                lambda done, total, name: report((done, total, name)), stop=lambda: cancel.cancelled
            )
        )

    def _on_progress(self, value) -> None:
        done, total, name = value
        self.bar.setVisible(True)
        self.bar.setRange(0, max(1, total))
        self.bar.setValue(done)
        waits = _SEND_WAITS if _SEND_WAITS in self.status.text() else ""
        self.status.setText(f"Indexing {done:,} of {total:,} files" + (f" · {name}" if name else "") + waits)

    def _on_indexed(self, report) -> None:
        self.bar.setVisible(False)
        if self.index is None:
            return
        self.session.documents = self.index
        problems = f"; {len(report.problems)} could not be read ({report.problems[0]})" if report.problems else ""
        skipped = f"; {said_skipped(report)}" if report.skipped else ""
        self.status.setText(f"{report.files:,} files searchable{problems}{skipped}")
        if report.read or report.forgotten:
            self.said.emit(f"Documents: {report.read:,} files read, {report.forgotten:,} forgotten")
        self.recheck.start()

    def _on_failed(self, exc: Exception) -> None:
        self.bar.setVisible(False)
        self.status.setText(f"Indexing stopped: {exc}")
