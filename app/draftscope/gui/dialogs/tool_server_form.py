"""Settings ▸ Tools' forms: one MCP server added or edited (a name; a command with its arguments and
environment, or a URL with its headers), and the ``mcpServers`` JSON of LM Studio, Claude Desktop or
Cursor imported (pasted, or read from a file). Each refuses OK, with the reason in words, while what
it holds is not a server (McpServer.problems, toolbox/servers.py)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from draftscope.gui.fit_screen import fit_dialog
from draftscope.gui.form_widgets import form_layout, hint, row, show_error, wrapping_label
from draftscope.toolbox.servers import McpServer

MAX_IMPORT_BYTES = 1 << 20  # an mcpServers file is a few KB
ARGS_HINT = "As a shell would split them: quote an argument that holds spaces"


def _sentence(words: str) -> str:
    return words[:1].upper() + words[1:]


def _one_label_width(form: QFormLayout) -> None:
    """Every label as wide as the widest: the fields keep their place when the kind's rows swap."""
    labels = [form.itemAt(r, QFormLayout.ItemRole.LabelRole) for r in range(form.rowCount())]
    widgets = [item.widget() for item in labels if item is not None and item.widget() is not None]
    width = max(w.sizeHint().width() for w in widgets)
    for w in widgets:
        w.setMinimumWidth(width)
        w.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


class KeyValueRows(QWidget):
    """Name = value rows (environment variables, HTTP headers), added and removed with buttons."""

    def __init__(self, name: str, key_title: str) -> None:
        super().__init__(objectName=name)
        self.table = QTableWidget(0, 2, objectName=name + "Table")
        self.table.setHorizontalHeaderLabels([key_title, "Value"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setMaximumHeight(110)
        add = QPushButton("Add", objectName=name + "Add")
        add.clicked.connect(lambda: self.add_row("", ""))
        self.remove_button = QPushButton("Remove", objectName=name + "Remove")
        self.remove_button.clicked.connect(self._remove)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.table)
        column.addWidget(row(add, self.remove_button, stretch_first=False))

    def add_row(self, key: str, value: str) -> None:
        r = self.table.rowCount()
        self.table.insertRow(r)
        self.table.setItem(r, 0, QTableWidgetItem(key))
        self.table.setItem(r, 1, QTableWidgetItem(value))
        if not key:
            self.table.setCurrentCell(r, 0)
            self.table.editItem(self.table.item(r, 0))

    def _remove(self) -> None:
        rows = sorted({i.row() for i in self.table.selectedIndexes()} or {self.table.currentRow()}, reverse=True)
        for r in rows:
            if r >= 0:
                self.table.removeRow(r)

    def show_values(self, values: dict[str, str]) -> None:
        self.table.setRowCount(0)
        for key, value in values.items():
            self.add_row(key, value)

    def _cells(self) -> list[tuple[str, str]]:
        def text(r: int, c: int) -> str:
            item = self.table.item(r, c)
            return item.text() if item is not None else ""

        return [(text(r, 0).strip(), text(r, 1)) for r in range(self.table.rowCount())]

    def values(self) -> dict[str, str]:
        """The rows with a name (a row left empty is dropped)."""
        return {key: value for key, value in self._cells() if key}

    def problem(self, what: str) -> str | None:
        """A value without a name, or a name given twice, in words (``what``: "variable", "header")."""
        keys = [key for key, _ in self._cells()]
        if any(not key and value for key, value in self._cells()):
            return f"A {what} has a value but no name"
        twice = sorted({key for key in keys if key and keys.count(key) > 1})
        return f"The {what} {twice[0]!r} is given twice" if twice else None


class ServerForm(QDialog):
    """Add a server (``server`` None) or edit one; ``name_problem(name)`` says why a name cannot be
    used (another server has it). After Accepted, ``server()`` is the server the form holds, with the
    edited one's switches (on or off, its tools', those run without asking) kept."""

    def __init__(
        self, parent: QWidget | None, name_problem: Callable[[str], str | None], server: McpServer | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("toolServerForm")
        self.setWindowTitle("Edit MCP server" if server is not None else "Add MCP server")
        self._base, self._name_problem = server or McpServer(name=""), name_problem
        form = form_layout(self)
        self.name_edit = QLineEdit(objectName="serverNameEdit", placeholderText="files")
        form.addRow("Name:", self.name_edit)
        self.kind = QComboBox(objectName="serverKindCombo")
        self.kind.addItem("A program this computer runs (stdio)", "stdio")
        self.kind.addItem("A URL (streamable HTTP)", "http")
        self.kind.currentIndexChanged.connect(self._show_kind)
        form.addRow("Reached by:", row(self.kind, stretch_first=False))
        self._program_rows(form)
        self._url_rows(form)
        self.error_label = wrapping_label(objectName="serverFormError")
        show_error(self.error_label)
        self.error_label.hide()
        form.addRow(self.error_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setObjectName("serverFormOk")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        _one_label_width(form)
        self._show(self._base)
        fit_dialog(self, QSize(max(560, self.sizeHint().width()), self.sizeHint().height()))

    def _program_rows(self, form) -> None:
        self.command_edit = QLineEdit(objectName="serverCommandEdit", placeholderText="npx, uvx, python, or a path")
        browse = QPushButton("Browse…", objectName="serverCommandBrowse")
        browse.clicked.connect(self._browse)
        self.args_edit = QLineEdit(objectName="serverArgsEdit")
        self.args_edit.setPlaceholderText("-y @modelcontextprotocol/server-filesystem /home/me/notes")
        self.env = KeyValueRows("serverEnv", "Variable")
        self._stdio_rows = [row(self.command_edit, browse), self.args_edit, hint(ARGS_HINT), self.env]
        for label, widget in zip(("Command:", "Arguments:", "", "Environment:"), self._stdio_rows, strict=True):
            form.addRow(label, widget)

    def _url_rows(self, form) -> None:
        self.url_edit = QLineEdit(objectName="serverUrlEdit", placeholderText="http://127.0.0.1:8000/mcp")
        self.headers = KeyValueRows("serverHeaders", "Header")
        self._http_rows = [self.url_edit, self.headers]
        form.addRow("URL:", self.url_edit)
        form.addRow("Headers:", self.headers)
        self._form = form

    def _show(self, server: McpServer) -> None:
        self.name_edit.setText(server.name)
        self.kind.setCurrentIndex(self.kind.findData(server.kind))
        self.command_edit.setText(server.command)
        self.args_edit.setText(shlex.join(server.args))
        self.env.show_values(server.env)
        self.url_edit.setText(server.url)
        self.headers.show_values(server.headers)
        self._show_kind()

    def _show_kind(self, *_args) -> None:
        for widget in self._stdio_rows:
            self._form.setRowVisible(widget, not self.is_http())
        for widget in self._http_rows:
            self._form.setRowVisible(widget, self.is_http())

    def is_http(self) -> bool:
        return self.kind.currentData() == "http"

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The server's program", self.command_edit.text())
        if path:
            self.command_edit.setText(path)

    def server(self) -> McpServer:
        """The server the form holds (ValueError in words where it cannot be one)."""
        name = self.name_edit.text().strip()
        if self.is_http():
            return replace(self._base, name=name, command="", args=(), env={}, url=self.url_edit.text().strip(),
                           headers=self.headers.values())  # fmt: skip
        try:
            args = tuple(shlex.split(self.args_edit.text()))
        except ValueError as exc:  # an unclosed quote
            raise ValueError(f"The arguments cannot be split: {exc}") from None
        command = self.command_edit.text().strip()
        return replace(self._base, name=name, command=command, args=args, env=self.env.values(), url="", headers={})

    def problems(self) -> list[str]:
        """Why OK is refused, in words (none: the form holds a server)."""
        out = [p for p in (self._name_problem(self.name_edit.text().strip()),) if p]
        table, what = (self.headers, "header") if self.is_http() else (self.env, "variable")
        out += [p for p in (table.problem(what),) if p]
        try:
            out += self.server().problems()
        except ValueError as exc:
            out.append(str(exc))
        return out

    def accept(self) -> None:
        problems = self.problems()
        if problems:
            self.error_label.setText("\n".join(_sentence(p) for p in problems))
            self.error_label.show()
            return
        super().accept()


class ImportForm(QDialog):
    """The ``mcpServers`` JSON pasted, or read from a file; ``take(text)`` imports it (ValueError in
    words refuses OK, showing why)."""

    def __init__(self, parent: QWidget | None, take: Callable[[str], str]) -> None:
        super().__init__(parent)
        self.setObjectName("toolImportForm")
        self.setWindowTitle("Import MCP servers")
        self._take, self.result_words = take, ""
        self.text = QPlainTextEdit(objectName="importJsonEdit")
        self.text.setPlaceholderText('{"mcpServers": {"files": {"command": "npx", "args": ["-y", "..."]}}}')
        self.text.setMinimumHeight(160)
        open_button = QPushButton("Open file…", objectName="importOpenFile")
        open_button.clicked.connect(self._open)
        self.error_label = wrapping_label(objectName="importError")
        show_error(self.error_label)
        self.error_label.hide()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setObjectName("importOk")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        column = QVBoxLayout(self)
        column.addWidget(
            QLabel("Paste the mcpServers JSON of LM Studio (mcp.json), Claude Desktop or Cursor, or open its file:")
        )
        column.addWidget(self.text)
        column.addWidget(row(open_button, stretch_first=False))
        column.addWidget(self.error_label)
        column.addWidget(buttons)
        fit_dialog(self, QSize(620, self.sizeHint().height()))

    def _open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "mcpServers JSON", "", "JSON (*.json);;All files (*)")
        if path:
            self.read_file(Path(path))

    def read_file(self, path: Path) -> None:
        """The file's text in the form (or why it cannot be read)."""
        try:
            if path.stat().st_size > MAX_IMPORT_BYTES:
                raise ValueError(f"{path.stat().st_size:,} bytes: too large for an mcpServers file")
            self.text.setPlainText(path.read_text(encoding="utf-8"))
            self.error_label.hide()
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.error_label.setText(f"{path.name} could not be read: {exc}")
            self.error_label.show()

    def accept(self) -> None:
        try:
            self.result_words = self._take(self.text.toPlainText())
        except ValueError as exc:
            self.error_label.setText(_sentence(str(exc)))
            self.error_label.show()
            return
        super().accept()
