"""The conversations panel: New, a search box and the list (rename in place with F2 or a
double-click, a context menu), and what is done to a conversation as a whole: rename, delete
(asked first), export as Markdown; every conversation exported or imported. Changes go to the history store; the window hears
``chosen(id)`` when another conversation is picked and ``deleted(id)`` when one is gone."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QFileDialog,
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from draftscope.storage.transfer import ImportError_, import_file, write_export


def export_file_name(title: str) -> str:
    """A file name for a conversation's Markdown export (characters no file system minds)."""
    safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip()
    return f"{safe or 'conversation'}.md"


class ConversationList(QWidget):
    chosen = Signal(int)  # a conversation was picked in the list
    new_requested = Signal()
    deleted = Signal(int)
    said = Signal(str)  # a short confirmation for the status bar

    def __init__(self, history, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.selected: int | None = None  # the conversation shown (kept selected across reloads)
        self.menu_actions: list[QAction | None] = []  # the context menu (None: a separator)
        new_button = QPushButton("New conversation", objectName="newConversationButton")
        new_button.clicked.connect(self.new_requested)
        self.search_box = QLineEdit(objectName="conversationSearch")
        self.search_box.setPlaceholderText("Search conversations")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.textChanged.connect(lambda _: self.reload())
        self.list = QListWidget(objectName="conversationList")
        self.list.currentItemChanged.connect(self._on_current_changed)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._context_menu)
        self.list.itemChanged.connect(self._on_item_renamed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(new_button)
        layout.addWidget(self.search_box)
        layout.addWidget(self.list)

    def select(self, conversation_id: int | None) -> None:
        """Show ``conversation_id`` as the current one (None: nothing selected). The list is left
        as it is when the conversation is in it: this runs inside the list's own selection signal,
        and rebuilding it there would lose the press (a double-click would no longer rename)."""
        self.selected = conversation_id
        items = [self.list.item(i) for i in range(self.list.count())]
        item = next((it for it in items if it.data(Qt.ItemDataRole.UserRole) == conversation_id), None)
        if item is None and conversation_id is not None:
            self.reload()  # a new conversation
            return
        self.list.blockSignals(True)
        self.list.setCurrentItem(item)
        self.list.blockSignals(False)

    def reload(self) -> None:
        """List the conversations again (those matching the search), keeping the selection."""
        query = self.search_box.text().strip()
        found = self.history.search(query) if query else self.history.conversations()
        self.list.blockSignals(True)
        self.list.clear()
        for conv in found:
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)  # F2 / double-click renames
            self.list.addItem(item)
            if conv.id == self.selected:
                self.list.setCurrentItem(item)
        if self.selected is None:
            self.list.setCurrentItem(None)
        self.list.blockSignals(False)

    def _on_current_changed(self, item, _previous=None) -> None:
        if item is not None:
            self.chosen.emit(item.data(Qt.ItemDataRole.UserRole))

    def _on_item_renamed(self, item) -> None:
        title = item.text().strip()
        conv_id = item.data(Qt.ItemDataRole.UserRole)
        if title:
            self.history.rename(conv_id, title)
        else:  # an empty title is not a title: put the old one back
            old = self.history.conversation(conv_id)
            self.list.blockSignals(True)
            item.setText(old.title if old else "")
            self.list.blockSignals(False)

    def _context_menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        self.list.setCurrentItem(item)
        menu = QMenu(self)
        for action in self.menu_actions:
            if action is None:
                menu.addSeparator()
            else:
                menu.addAction(action)
        menu.exec(self.list.viewport().mapToGlobal(pos))

    # --- a conversation as a whole ---------------------------------------------------------------

    def ask_rename(self, conversation_id: int) -> None:
        conv = self.history.conversation(conversation_id)
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=conv.title if conv else "")
        if ok and title.strip():
            self.rename(conversation_id, title.strip())

    def rename(self, conversation_id: int, title: str) -> None:
        self.history.rename(conversation_id, title)
        self.reload()

    def ask_delete(self, conversation_id: int) -> None:
        conv = self.history.conversation(conversation_id)
        answer = QMessageBox.question(
            self,
            "Delete conversation",
            f"Delete \u201c{conv.title if conv else ''}\u201d and all its messages? This cannot be undone.",
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.delete(conversation_id)

    def delete(self, conversation_id: int) -> None:
        self.history.delete(conversation_id)
        if conversation_id == self.selected:
            self.selected = None
        self.reload()
        self.deleted.emit(conversation_id)

    def ask_export(self, conversation_id: int) -> None:
        conv = self.history.conversation(conversation_id)
        path, _ = QFileDialog.getSaveFileName(
            self, "Export conversation", export_file_name(conv.title if conv else "conversation"), "Markdown (*.md)"
        )
        if path:
            self.export(conversation_id, Path(path))

    def export(self, conversation_id: int, path: Path) -> None:
        try:
            path.write_text(self.history.export_markdown(conversation_id), encoding="utf-8")
        except OSError as exc:
            QMessageBox.warning(self, "Draftscope", f"The conversation could not be exported to {path}: {exc}")
            return
        self.said.emit(f"Exported to {path}")

    def ask_export_all(self) -> None:
        """Every conversation to one file: the app's JSON (to import again) or Markdown (to read)."""
        path, _ = QFileDialog.getSaveFileName(
            self,
            "Export all conversations",
            "draftscope-conversations.json",
            "Draftscope conversations (*.json);;Markdown (*.md)",
        )
        if path:
            self.export_all(Path(path))

    def export_all(self, path: Path) -> None:
        try:
            count = write_export(self.history, path)
        except OSError as exc:
            QMessageBox.warning(self, "Draftscope", f"The conversations could not be exported to {path}: {exc}")
            return
        self.said.emit(f"Exported {count} conversation{'s' * (count != 1)} to {path}")

    def ask_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import conversations", "", "Conversations (*.json);;All files (*)")
        if path:
            self.import_from(Path(path))

    def import_from(self, path: Path) -> None:
        """The app's JSON or ChatGPT's conversations.json; a file that cannot be imported is said
        and imports nothing."""
        try:
            report = import_file(self.history, path)
        except ImportError_ as exc:
            QMessageBox.warning(self, "Draftscope", str(exc))
            return
        self.reload()
        self.said.emit(report.words())
