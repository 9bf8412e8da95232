"""Where the user writes: the message box (Enter sends, Shift+Enter breaks the line, Esc leaves an
edit), the banner shown while a message is being edited, the files attached to the message (the
Attach button, files dropped on the box, their chips), and the Regenerate / Edit / Stop / Send
buttons. It holds no conversation: the window acts on its signals."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from draftscope.gui.chat.attachments import AttachmentChips, AttachmentReader, FileDrops

ATTACH_FILTER = (
    "Documents (*.txt *.md *.markdown *.rst *.html *.htm *.pdf *.docx *.csv *.json *.py *.c *.h *.cpp "
    "*.rs *.js *.ts *.java *.go *.sh *.toml *.yaml *.yml *.xml *.log);;All files (*)"
)


class _EnterSends(QObject):
    """Enter sends, Shift+Enter breaks the line, Esc leaves an edit."""

    def __init__(self, on_send, on_escape) -> None:
        super().__init__()
        self.on_send, self.on_escape = on_send, on_escape

    def eventFilter(self, obj, event) -> bool:
        if event.type() != QEvent.Type.KeyPress:
            return False
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.on_send()
                return True
        elif event.key() == Qt.Key.Key_Escape:
            return self.on_escape()
        return False


class Composer(QWidget):
    send_requested = Signal()
    stop_requested = Signal()
    regenerate_requested = Signal()
    edit_last_requested = Signal()
    attach_failed = Signal(str)  # why a file could not be attached (each file named)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editing_message_id: int | None = None  # sending replaces this message and what followed
        self.edit_banner = QLabel(
            "Editing a message: Enter sends it in place of the old one and what followed, Esc cancels.",
            objectName="editBanner",
            wordWrap=True,  # unwrapped, it widened the window past a laptop's screen
        )
        self.edit_banner.hide()
        self.chat_input = QPlainTextEdit(objectName="chatInput")
        self.chat_input.setPlaceholderText("Message (Enter sends, Shift+Enter breaks the line)")
        self.chat_input.setMaximumHeight(110)
        self._enter = _EnterSends(self._send, self._escape)
        self.chat_input.installEventFilter(self._enter)
        self.chips = AttachmentChips(self)
        self.reader = AttachmentReader(self)  # files being read, on a worker: a row with Cancel
        self.reader.read.connect(self.chips.add)
        self.reader.failed.connect(self.attach_failed)
        self.drops = FileDrops(self.attach_paths, self)
        self.drops.install(self.chat_input)
        self.attach_button = QPushButton("Attach…", objectName="attachButton")
        self.attach_button.setToolTip(
            "Give the model files to read with your message (text, code, HTML, PDF, "
            "DOCX); you can also drop files on the chat"
        )
        self.attach_button.clicked.connect(self.choose_files)
        self.regenerate_button = QPushButton("Regenerate", objectName="regenerateButton")
        self.regenerate_button.setToolTip("Answer the last message again (Ctrl+R)")
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        self.edit_button = QPushButton("Edit last message", objectName="editButton")
        self.edit_button.setToolTip("Edit your last message and send it again (Ctrl+E)")
        self.edit_button.clicked.connect(self.edit_last_requested)
        self.send_button = QPushButton("Send", objectName="sendButton")
        self.send_button.clicked.connect(self._send)
        self.stop_button = QPushButton("Stop", objectName="stopButton")
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.setEnabled(False)
        self.read_ahead_label = QLabel(objectName="readAheadLabel", enabled=False)  # greyed, as a hint
        self.read_ahead_label.setToolTip(
            "The model has read this much of the conversation, your files and your message while you "
            "typed: Send reads only the rest (Settings ▸ Generation ▸ Read ahead)"
        )
        self.read_ahead_label.hide()
        buttons = QHBoxLayout()
        buttons.addWidget(self.regenerate_button)
        buttons.addWidget(self.edit_button)
        buttons.addWidget(self.attach_button)
        buttons.addStretch(1)
        buttons.addWidget(self.read_ahead_label)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit_banner)
        layout.addWidget(self.chips)
        layout.addWidget(self.reader)
        layout.addWidget(self.chat_input)
        layout.addLayout(buttons)

    def text(self) -> str:
        return self.chat_input.toPlainText().strip()

    def clear(self) -> None:
        """After sending: the box and its attachments."""
        self.chat_input.clear()
        self.chips.clear()

    @property
    def attachments(self) -> list:
        return list(self.chips.files)

    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", "", ATTACH_FILTER)
        if paths:
            self.attach_paths(paths)

    def attach_paths(self, paths: list[str]) -> None:
        """Read the files on a worker and show them as chips as they are read; those that cannot be
        read are said, the rest kept."""
        self.reader.read_paths(paths)

    def _send(self) -> None:
        if self.reader.reading:  # the message would go without the file the user just attached
            self.reader.say_send_waits()
            return
        self.send_requested.emit()

    def begin_edit(self, message_id: int, text: str, files=()) -> None:
        """Put a message and its files back in the box to replace it when sent."""
        self.editing_message_id = message_id
        self.restore(text, files)
        self.edit_banner.show()

    def restore(self, text: str, files=()) -> None:
        """A message and its files back in the box, the cursor at its end."""
        self.chips.clear()
        for f in files:
            self.chips.add(f)
        self.chat_input.setPlainText(text)
        self.chat_input.setFocus()
        cursor = self.chat_input.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        self.chat_input.setTextCursor(cursor)

    def end_edit(self) -> None:
        self.editing_message_id = None
        self.edit_banner.hide()

    def _escape(self) -> bool:
        if self.editing_message_id is None:
            return False
        self.end_edit()
        self.clear()
        return True

    def show_read_ahead(self, read: int | None, total: int = 0) -> None:
        """How much of the prompt Send would send the model has read already (None: nothing)."""
        self.read_ahead_label.setVisible(read is not None)
        if read is not None:
            self.read_ahead_label.setText(f"{min(read, total):,} of {total:,} tokens read")

    def set_state(self, *, streaming: bool, has_messages: bool) -> None:
        self.send_button.setEnabled(not streaming)
        self.stop_button.setEnabled(streaming)
        self.regenerate_button.setEnabled(has_messages)
        self.edit_button.setEnabled(has_messages)
