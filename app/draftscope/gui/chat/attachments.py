"""Files on their way to the model, in the window: chips above the message box (each file's name,
its size in tokens, a button that removes it) until the message is sent, files dropped onto the
chat or the message box, and the text a sent file gave the model, shown when its link is clicked."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from draftscope.documents.extract import Attachment, AttachmentError, read_file


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


def read_files(paths: list[str]) -> tuple[list[Attachment], list[str]]:
    """The files that could be read, and why each other could not."""
    read, problems = [], []
    for path in paths:
        try:
            read.append(read_file(path))
        except AttachmentError as exc:
            problems.append(str(exc))
    return read, problems


def sent_file_dialog(parent: QWidget, f: dict) -> QDialog:
    """What the model read of a sent file (the file whole, or the passages chosen for the question)."""
    dialog = QDialog(parent, objectName="attachmentText")
    dialog.setWindowTitle(f["name"])
    dialog.resize(720, 520)
    how = (
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
