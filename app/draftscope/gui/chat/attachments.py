"""Files on their way to the model, in the window: files dropped onto the chat or the message box
or chosen with Attach…, read on a worker thread while a row says so and offers Cancel (the window
stays responsive, whatever the file), chips above the message box (each file's name, its size in
tokens, a button that removes it) until the message is sent, and the text a sent file gave the
model, shown when its link is clicked."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import NamedTuple

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from draftscope.datastore.progress import CancelToken
from draftscope.documents.extract import Attachment, AttachmentError, ReadCancelled, read_file
from draftscope.documents.prompt import left_out_note
from draftscope.gui.jobs import JobRunner


class AttachmentChips(QWidget):
    """The files attached to the message being written; hidden while there are none."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, objectName="attachmentChips")
        self.files: list[Attachment] = []
        self.count_tokens = None  # text -> tokens (the model's tokenizer), set by the window
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addStretch(1)
        self.hide()

    def add(self, attachment: Attachment) -> None:
        self.files.append(attachment)
        self._rebuild()

    def remove(self, index: int) -> None:
        del self.files[index]
        self._rebuild()

    def clear(self) -> None:
        self.files = []
        self._rebuild()

    def chips(self) -> list[QFrame]:
        return [self._row.itemAt(i).widget() for i in range(self._row.count() - 1)]

    def _rebuild(self) -> None:
        while self._row.count() > 1:
            self._row.takeAt(0).widget().deleteLater()
        for i, f in enumerate(self.files):
            self._row.insertWidget(i, self._chip(i, f))
        self.setVisible(bool(self.files))
        self.changed.emit()

    def _chip(self, index: int, f: Attachment) -> QFrame:
        chip = QFrame(objectName="attachmentChip")
        chip.setFrameShape(QFrame.Shape.StyledPanel)
        row = QHBoxLayout(chip)
        row.setContentsMargins(6, 2, 2, 2)
        label = QLabel(f"{f.name} · {self._size(f)}")
        label.setToolTip(f.text[:400] + ("…" if len(f.text) > 400 else ""))
        remove = QToolButton(text="✕", objectName="removeAttachment", autoRaise=True)
        remove.setToolTip(f"Remove {f.name}")
        remove.clicked.connect(lambda _=False, i=index: self.remove(i))
        row.addWidget(label)
        row.addWidget(remove)
        return chip

    def _size(self, f: Attachment) -> str:
        if self.count_tokens is None:
            return f"{f.chars:,} characters"
        return f"{self.count_tokens(f.text):,} tokens"


class FileDrops(QObject):
    """Files dropped on a widget (its viewport, for a text view) go to ``on_paths``; other drops are
    the widget's own."""

    def __init__(self, on_paths, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.on_paths = on_paths

    def install(self, view) -> None:
        """Take file drops on a text view (its viewport gets them; a read-only view takes none)."""
        view.setAcceptDrops(True)
        view.viewport().setAcceptDrops(True)
        view.viewport().installEventFilter(self)

    @staticmethod
    def paths(event) -> list[str]:
        mime = event.mimeData()
        if not mime.hasUrls():
            return []
        return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]

    def eventFilter(self, obj, event) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove) and self.paths(event):
            event.acceptProposedAction()
            return True
        if kind == QEvent.Type.Drop and (paths := self.paths(event)):
            event.acceptProposedAction()
            self.on_paths(paths)
            return True
        return False


class ReadOutcome(NamedTuple):
    """The files of one batch that could be read, and why each other could not."""

    read: list[Attachment]
    problems: list[str]


def read_files(paths: list[str], status=None, cancel: CancelToken | None = None) -> ReadOutcome:
    """Read ``paths`` one after the other (on a worker thread: a file may take up to the reader's
    time limit), saying which through ``status``; a cancel ends the file being read at once."""
    stop = threading.Event()
    if cancel is not None:
        cancel.on_cancel(stop.set)
    outcome = ReadOutcome([], [])
    for number, path in enumerate(paths, 1):
        if stop.is_set():
            break
        name = Path(path).name
        if status is not None:
            status(f"Reading {name} …" + (f" ({number} of {len(paths)})" if len(paths) > 1 else ""))
        try:
            outcome.read.append(read_file(path, cancel=stop))
        except ReadCancelled:
            break
        except AttachmentError as exc:
            outcome.problems.append(str(exc))
        except Exception as exc:  # the reader promises AttachmentError; a bug still names the file
            outcome.problems.append(f"{name} could not be read: {exc!r}")
    return outcome


_SEND_WAITS = " — Send once it is attached"


class AttachmentReader(QWidget):
    """Files on their way to becoming chips: read on a worker thread, never the UI thread (a PDF
    may take the reader's whole time limit), while a row says which file is being read and offers
    Cancel. Files dropped meanwhile wait their turn. ``read`` gives each file read, ``failed`` the
    reasons of those that could not be; a cancelled batch gives neither."""

    read = Signal(object)  # an Attachment
    failed = Signal(str)  # why files could not be read, each named

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, objectName="attachmentReading")
        self.label = QLabel(objectName="attachmentReadingLabel")
        self.cancel_button = QPushButton("Cancel", objectName="cancelAttachButton")
        self.cancel_button.setToolTip("Stop reading the files: none of them is attached")
        self.cancel_button.clicked.connect(self.cancel)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(self.cancel_button)
        self._waiting: list[str] = []
        self._send_waits = False  # Send was pressed while reading: the row says so until the reading ends
        self._runner = JobRunner(self, on_status=self._say, on_done=self._done, on_failed=self._crashed)
        self.hide()

    @property
    def reading(self) -> bool:
        return self._runner.running or bool(self._waiting)

    def read_paths(self, paths: list[str]) -> None:
        self._waiting += paths
        self._next()

    def cancel(self) -> None:
        """Stop the file being read (its reader is ended) and forget those waiting."""
        self._waiting = []
        if self._runner.cancel():
            self.label.setText("Cancelling …")
            self.cancel_button.setEnabled(False)

    def say_send_waits(self) -> None:
        """Send was pressed while a file is read: the message waits for it (the row says so, and
        keeps saying so when the worker names the next file)."""
        self._send_waits = True
        self._say(self.label.text())

    def _say(self, status: str) -> None:
        self.label.setText(status.split(_SEND_WAITS)[0] + (_SEND_WAITS if self._send_waits else ""))

    def close(self) -> None:
        """The window is closing: the reading stops and its thread ends."""
        self._waiting = []
        self._runner.close()

    def _next(self) -> None:
        if not self._runner.running and self._waiting:
            batch, self._waiting = self._waiting, []
            self._say(f"Reading {Path(batch[0]).name} …")
            self.cancel_button.setEnabled(True)
            self._runner.start(lambda report, status, cancel: read_files(batch, status, cancel))
        self.setVisible(self._runner.running)
        if not self._runner.running:
            self._send_waits = False

    def _done(self, outcome: ReadOutcome) -> None:
        if not self._runner.cancelled:
            for attachment in outcome.read:
                self.read.emit(attachment)
            if outcome.problems:
                self.failed.emit("\n".join(outcome.problems))
        self._next()

    def _crashed(self, exc: Exception) -> None:
        self.failed.emit(f"The files could not be read: {exc}")
        self._next()


def sent_file_dialog(parent: QWidget, f: dict) -> QDialog:
    """What the model read of a sent file (the file whole, or the passages chosen for the question)."""
    dialog = QDialog(parent, objectName="attachmentText")
    dialog.setWindowTitle(f["name"])
    dialog.resize(720, 520)
    how = left_out_note(f) or (
        "the whole file"
        if not f.get("passages")
        else f"{len(f['passages'])} passages chosen for the question: {', '.join(f['passages'])}"
    )
    note = QLabel(f"What the model read of {f['name']} ({f.get('tokens', 0):,} tokens): {how}.")
    note.setWordWrap(True)
    text = QPlainTextEdit(f["text"], readOnly=True)
    text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout = QVBoxLayout(dialog)
    layout.addWidget(note)
    layout.addWidget(text)
    layout.addWidget(buttons)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    return dialog
