"""Settings ▸ Tools: the MCP servers whose tools the model may call, each switched on or off; Add,
Edit, Remove and Import (the forms: ``tool_server_form``); the chosen server's tools with what each
does and a switch each, listed by starting the server on a background job (gui/jobs.py; a failure
said in words); the tools that run without asking, each of which can be made to ask again; and the
limits (calls for one message, a call's timeout).

The widgets observe a Qt-free model (core/tool_settings.py: ToolServers) and change it; the dialog
reads the settings back with ``values``. Who reads those settings: the window's tool host and its
calling loop (the servers, their switches, the calls' limits) and the terminal's ``--mcp``."""

from __future__ import annotations

import shlex

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from draftscope.core.tool_settings import FAILED, LISTING, ToolServers, list_tools
from draftscope.gui.dialogs.tool_server_form import ImportForm, ServerForm
from draftscope.gui.form_widgets import double_spin, form_layout, hint, int_spin, row, show_error
from draftscope.gui.jobs import JobRunner
from draftscope.storage.settings import MAX_TOOL_CALLS, MAX_TOOL_TIMEOUT_S, Settings, server_problem
from draftscope.toolbox.servers import McpServer

NAME_ROLE = Qt.ItemDataRole.UserRole
MAX_NAME_COLUMN = 260  # px: a longer name is elided, the description keeps its room
INDICATOR_ROOM = 12  # px: the style sheet's check box is wider than the one Qt measures names with
SERVERS_HINT = (
    "The model sees the tools of the servers ticked here. Each call it makes is shown in the "
    "conversation and runs only once you approve it (or, for a tool you always allow, at once)."
)
CALLS_HINT = "for one message of yours; past it the model answers without more"
TIMEOUT_HINT = "a call that runs longer ends, and the model is told it timed out"
NO_SERVER = "Add a server, or choose one, to see its tools."


def _column(*widgets: QWidget) -> QWidget:
    box = QWidget()
    column = QVBoxLayout(box)
    column.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        column.addWidget(widget)
    return box


def _beside(field: QWidget, words: str) -> QWidget:
    """A field at its own width and its hint beside it, wrapped where the page is narrow."""
    box = QWidget()
    line = QHBoxLayout(box)
    line.setContentsMargins(0, 0, 0, 0)
    line.addWidget(field)
    line.addWidget(hint(words, wrap=True), 1)
    return box


def _table(name: str, titles: list[str], *, height: tuple[int, int]) -> QTreeWidget:
    """A list of checkable rows in columns, the first as wide as its names, the last the rest."""
    table = QTreeWidget(objectName=name)
    table.setHeaderLabels(titles)
    table.setRootIsDecorated(False)
    table.setMinimumHeight(height[0])
    table.setMaximumHeight(height[1])
    if height[1] < 1000:  # a list of a few rows: the page's spare height goes to the tools instead
        table.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
    table.header().setStretchLastSection(True)
    return table


def _fit_names(table: QTreeWidget) -> None:
    """The names' column as wide as its longest name (within MAX_NAME_COLUMN): Qt's measure leaves out the style sheet's
    larger check box (app.qss), which would cut each name short by a few letters."""
    table.resizeColumnToContents(0)
    table.setColumnWidth(0, min(table.columnWidth(0) + INDICATOR_ROOM, MAX_NAME_COLUMN))


def server_summary(server: McpServer) -> str:
    """How the server is reached, in one line: its command line, or its URL."""
    if server.url:
        return server.url
    line = shlex.join((server.command, *server.args))
    return line + (f"  (+{len(server.env)} environment)" if server.env else "")


class ToolsTab(QWidget):
    """The Tools page of the settings dialog (``show_settings``, ``values``, ``fields`` as the others)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = ToolServers()
        self._filling = False  # lists being filled from the model: their item changes are not the user's
        self._asked: McpServer | None = None  # the server the running job lists
        self.jobs = JobRunner(self, on_done=self._listed, on_failed=self._list_failed)
        form = form_layout(self)
        form.addRow("Servers:", self._servers_box())
        form.addRow("", hint(SERVERS_HINT, wrap=True))
        form.addRow("Tools:", self._tools_box())
        form.addRow("Always allowed:", self._allowed_box())
        self.calls = int_spin("toolCallsSpin", 1, MAX_TOOL_CALLS)
        form.addRow("Calls per answer:", _beside(self.calls, CALLS_HINT))
        self.timeout = double_spin("toolTimeoutSpin", 1, MAX_TOOL_TIMEOUT_S, 10)
        self.timeout.setDecimals(0)
        self.timeout.setSuffix(" s")
        form.addRow("Call timeout:", _beside(self.timeout, TIMEOUT_HINT))
        self.fields = {
            "mcp_servers": self.server_list,
            "tool_calls_per_answer": self.calls,
            "tool_timeout_s": self.timeout,
        }
        self.model.events.servers.connect(self._show_servers)
        self.model.events.listing.connect(self._listing_changed)

    # --- building ---------------------------------------------------------------------------------

    def _servers_box(self) -> QWidget:
        self.server_list = _table("toolServerList", ["Server", "Reached by"], height=(84, 120))
        self.server_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a long command keeps its ends
        self.server_list.setToolTip("Ticked: the model may call this server's tools")
        self.server_list.currentItemChanged.connect(lambda *_: self._server_chosen())
        self.server_list.itemChanged.connect(self._server_switched)
        self.server_list.itemDoubleClicked.connect(lambda *_: self.edit_server())
        buttons = []
        for text, name, slot in (
            ("Add…", "addToolServer", self.add_server),
            ("Edit…", "editToolServer", self.edit_server),
            ("Remove", "removeToolServer", self.remove_server),
            ("Import mcpServers JSON…", "importToolServers", self.import_servers),
        ):
            button = QPushButton(text, objectName=name)
            button.clicked.connect(slot)
            buttons.append(button)
        self.edit_button, self.remove_button = buttons[1], buttons[2]
        self.note = hint("", wrap=True, objectName="toolServersNote")
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note.hide()
        return _column(self.server_list, row(*buttons, stretch_first=False), self.note)

    def _tools_box(self) -> QWidget:
        self.tools_status = hint(NO_SERVER, wrap=True, objectName="toolsStatus")
        self.tools_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.list_button = QPushButton("List again", objectName="listToolsButton")
        self.list_button.setToolTip("Start the server and ask for its tools again")
        self.list_button.clicked.connect(lambda: self._list(force=True))
        self.tool_list = _table("toolList", ["Tool", "What it does"], height=(150, 16_777_215))
        self.tool_list.setToolTip("Ticked: the model sees the tool; unticked: it is never offered")
        self.tool_list.itemChanged.connect(self._tool_switched)
        return _column(row(self.tools_status, self.list_button), self.tool_list)

    def _allowed_box(self) -> QWidget:
        self.allowed_list = QListWidget(objectName="alwaysAllowedList")
        self.allowed_list.setMaximumHeight(72)
        self.allowed_list.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.allowed_list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.allowed_none = hint("None: every call asks before it runs.", objectName="alwaysAllowedNone")
        self.ask_button = QPushButton("Ask first again", objectName="askAgainButton")
        self.ask_button.setToolTip("The chosen tools ask before they run again")
        self.ask_button.clicked.connect(self.take_back)
        self.allowed_list.itemSelectionChanged.connect(
            lambda: self.ask_button.setEnabled(bool(self.allowed_list.selectedItems()))
        )
        return _column(self.allowed_none, row(self.allowed_list, self.ask_button))

    # --- the settings ------------------------------------------------------------------------------

    def show_settings(self, s: Settings) -> None:
        current = self.current_name()
        self.model.reset([McpServer.from_dict(d) for d in s.mcp_servers if server_problem(d) is None])
        self.select(current or (self.model.names() or [""])[0])
        self.calls.setValue(s.tool_calls_per_answer)
        self.timeout.setValue(s.tool_timeout_s)

    def values(self) -> dict:
        return {
            "mcp_servers": self.model.values(),
            "tool_calls_per_answer": self.calls.value(),
            "tool_timeout_s": float(self.timeout.value()),
        }

    def close(self) -> None:
        """The dialog is closing: a listing under way is given up (its server stops on its own)."""
        self.jobs.close()

    # --- the servers ---------------------------------------------------------------------------

    def current_name(self) -> str:
        item = self.server_list.currentItem()
        return item.data(0, NAME_ROLE) if item is not None else ""

    def select(self, name: str) -> None:
        for i in range(self.server_list.topLevelItemCount()):
            if self.server_list.topLevelItem(i).data(0, NAME_ROLE) == name:
                self.server_list.setCurrentItem(self.server_list.topLevelItem(i))
                return

    def _show_servers(self) -> None:
        """The model's servers in the list (the chosen one kept), then its tools and the allowed ones.
        The same servers in the same order are updated in place: this runs inside the list's own
        itemChanged when a server is switched, where its items must not be deleted."""
        current = self.current_name()
        shown = [
            self.server_list.topLevelItem(i).data(0, NAME_ROLE) for i in range(self.server_list.topLevelItemCount())
        ]
        self._filling = True
        try:
            if shown != self.model.names():
                self.server_list.clear()
                for server in self.model.servers:
                    item = QTreeWidgetItem([server.name, ""])
                    item.setData(0, NAME_ROLE, server.name)
                    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    self.server_list.addTopLevelItem(item)
            for i, server in enumerate(self.model.servers):
                item = self.server_list.topLevelItem(i)
                item.setText(1, server_summary(server))
                item.setCheckState(0, Qt.CheckState.Checked if server.enabled else Qt.CheckState.Unchecked)
                item.setToolTip(1, f"{server.name} ({server.kind}): {server_summary(server)}")
        finally:
            self._filling = False
        _fit_names(self.server_list)
        self.select(current)
        if self.server_list.currentItem() is None and self.server_list.topLevelItemCount():
            self.server_list.setCurrentItem(self.server_list.topLevelItem(0))
        self._show_allowed()
        self._server_chosen()

    def _server_switched(self, item: QTreeWidgetItem, column: int) -> None:
        if not self._filling and column == 0:
            self.model.set_enabled(item.data(0, NAME_ROLE), item.checkState(0) == Qt.CheckState.Checked)

    def add_server(self) -> None:
        self.form = ServerForm(self, self.model.name_problem)
        self.form.accepted.connect(lambda: self._added(self.form.server()))
        self.form.open()

    def _added(self, server: McpServer) -> None:
        self.model.add(server)
        self.select(server.name)

    def edit_server(self) -> None:
        name = self.current_name()
        server = self.model.find(name)
        if server is None:
            return
        self.form = ServerForm(self, lambda n: self.model.name_problem(n, editing=name), server)
        self.form.accepted.connect(lambda: self._edited(name, self.form.server()))
        self.form.open()

    def _edited(self, name: str, server: McpServer) -> None:
        self.model.edit(name, server)
        self.select(server.name)

    def remove_server(self) -> None:
        name = self.current_name()
        if name:
            self.model.remove(name)
            self._say(f"Removed {name} (Cancel keeps it).")

    def import_servers(self) -> None:
        self.form = ImportForm(self, self.model.import_json)
        self.form.accepted.connect(lambda: self._say(self.form.result_words))
        self.form.open()

    def _say(self, words: str) -> None:
        self.note.setText(words)
        self.note.show()

    # --- the chosen server's tools -------------------------------------------------------------

    def _server_chosen(self) -> None:
        has = bool(self.current_name())
        for button in (self.edit_button, self.remove_button, self.list_button):
            button.setEnabled(has)
        self._show_tools()
        self._list()

    def showEvent(self, event) -> None:  # Qt's name: the page is shown, its server's tools are listed
        super().showEvent(event)
        self._list()

    def _list(self, *, force: bool = False) -> None:
        """List the chosen server's tools on the background job, where they are not known yet and
        the page is seen (opening Settings starts no server); one listing at a time, the next after it."""
        server = self.model.find(self.current_name())
        if server is None or not self.isVisible() or self.jobs.running:
            return
        if not force and self.model.listing(server.name) is not None:
            return
        self._asked = server
        self.model.listing_started(server)
        self.jobs.start(lambda _report, _status, cancel: list_tools(server, lambda: cancel.cancelled))

    def _listed(self, tools) -> None:
        self.model.listed(self._asked, tools)
        self._list()  # the chosen server may have changed meanwhile

    def _list_failed(self, exc: Exception) -> None:
        if not isinstance(exc, InterruptedError):
            self.model.listing_failed(self._asked, str(exc))
        self._list()

    def _listing_changed(self, name: str) -> None:
        if name == self.current_name():
            self._show_tools()

    def _show_tools(self) -> None:
        name = self.current_name()
        listing = self.model.listing(name)
        failed = listing is not None and listing.state == FAILED
        rows = self.model.tool_rows(name)
        if not name:
            words = NO_SERVER
        elif listing is None:
            words = f"The tools of {name} are listed when this page is shown."
        elif listing.state == LISTING:
            words = f"Starting {name} to list its tools …"
        elif failed:
            words = f"Its tools could not be listed: {listing.error}"
        else:
            on = sum(r.enabled for r in rows if r.listed)
            words = (
                f"{name} has {len(listing.tools)} tools, {on} switched on."
                if listing.tools
                else f"{name} has no tools."
            )
        self.tools_status.setText(words)
        show_error(self.tools_status, failed)
        self.tools_status.setEnabled(failed)  # a hint's grey unless it is an error
        self._fill_tools(rows)

    def _fill_tools(self, rows) -> None:
        """The tools' rows; the same tools are updated in place (see _show_servers)."""
        shown = [self.tool_list.topLevelItem(i).data(0, NAME_ROLE) for i in range(self.tool_list.topLevelItemCount())]
        self._filling = True
        try:
            if shown != [r.name for r in rows]:
                self.tool_list.clear()
                for r in rows:
                    item = QTreeWidgetItem([r.name, ""])
                    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    item.setData(0, NAME_ROLE, r.name)
                    self.tool_list.addTopLevelItem(item)
            for i, r in enumerate(rows):
                item = self.tool_list.topLevelItem(i)
                first = r.description.strip().splitlines()[0] if r.description.strip() else ""
                item.setText(1, first if r.listed else "switched off (not listed now)")
                item.setCheckState(0, Qt.CheckState.Checked if r.enabled else Qt.CheckState.Unchecked)
                item.setToolTip(1, r.description.strip())
        finally:
            self._filling = False
        _fit_names(self.tool_list)

    def _tool_switched(self, item: QTreeWidgetItem, column: int) -> None:
        if not self._filling and column == 0:
            on = item.checkState(0) == Qt.CheckState.Checked
            self.model.set_tool_enabled(self.current_name(), item.data(0, NAME_ROLE), on)

    # --- the tools run without asking ----------------------------------------------------------

    def _show_allowed(self) -> None:
        self.allowed_list.clear()
        for server, tool in self.model.always_allowed():
            item = QListWidgetItem(f"{server} · {tool}")
            item.setData(NAME_ROLE, (server, tool))
            self.allowed_list.addItem(item)
        has = self.allowed_list.count() > 0
        self.allowed_list.setVisible(has)
        self.ask_button.setVisible(has)
        self.ask_button.setEnabled(False)
        self.allowed_none.setVisible(not has)

    def take_back(self) -> None:
        chosen = [item.data(NAME_ROLE) for item in self.allowed_list.selectedItems()]  # the list is filled anew
        for server, tool in chosen:
            self.model.take_back(server, tool)
