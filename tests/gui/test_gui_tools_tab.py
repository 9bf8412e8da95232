"""Settings ▸ Tools (offscreen Qt): a real MCP server's tools listed in the tab (the fixture server,
tests/toolbox/mcp_fixture_server.py) with their switches, servers added, edited, imported and
switched off, a server that cannot start said in words, the tools run without asking taken back,
the limits, and a page that fits a laptop's screen. What the tab changes reaches the settings the
window and the terminal read (result_settings after OK)."""

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QScrollArea

from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.gui.dialogs.tool_server_form import ImportForm, ServerForm
from draftscope.storage import Settings
from draftscope.storage.settings import tool_servers
from draftscope.toolbox import McpServer

pytestmark = pytest.mark.usefixtures("own_data_and_cache")

FIXTURE = str(Path(__file__).resolve().parents[1] / "toolbox" / "mcp_fixture_server.py")
NOTES = McpServer(name="notes", command=sys.executable, args=(FIXTURE,))
WEB = McpServer(name="web", url="http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer k"})
LISTING_S = 60  # starting a Python MCP server on a busy two-core machine


def open_tools(qtbot, settings: Settings) -> SettingsDialog:
    dialog = SettingsDialog(settings, devices=("cpu",))
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.tabs.setCurrentIndex(dialog.tabs.count() - 1)
    assert dialog.tabs.tabText(dialog.tabs.count() - 1) == "Tools"
    return dialog


def rows(tree) -> dict[str, tuple[str, bool]]:
    """Each row's name -> (its second column, ticked)."""
    items = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    return {i.text(0): (i.text(1), i.checkState(0) == Qt.CheckState.Checked) for i in items}


def tick(tree, name: str, on: bool) -> None:
    item = next(tree.topLevelItem(i) for i in range(tree.topLevelItemCount()) if tree.topLevelItem(i).text(0) == name)
    item.setCheckState(0, Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)  # as a click does


def ok(dialog) -> Settings:
    dialog.accept()
    assert not dialog.isVisible(), dialog.error_label.text()
    return dialog.result_settings()


def test_a_real_servers_tools_are_listed_and_switched_on_and_off(qtbot):
    settings = Settings(mcp_servers=[replace(NOTES, disabled_tools=("crash",)).to_dict(), WEB.to_dict()])
    dialog = SettingsDialog(settings, devices=("cpu",))
    qtbot.addWidget(dialog)
    dialog.show()
    tab = dialog.tools
    assert tab.model.listing("notes") is None, "opening Settings starts no server"
    dialog.tabs.setCurrentIndex(dialog.tabs.count() - 1)
    qtbot.waitUntil(lambda: tab.tool_list.topLevelItemCount() > 3, timeout=LISTING_S * 1000)
    shown = rows(tab.tool_list)
    assert shown["read_note"] == ("Read the note of that name.", True)
    assert shown["crash"] == ("Die in the middle of the call.", False), "switched off before: still off"
    assert f"notes has {len(shown)} tools, {len(shown) - 1} switched on." == tab.tools_status.text()
    tick(tab.tool_list, "hang", False)
    assert tab.tools_status.text().endswith(f"{len(shown) - 2} switched on.")
    tick(tab.tool_list, "crash", True)
    assert tab.tools_status.text().endswith(f"{len(shown) - 1} switched on.")
    tick(tab.server_list, "web", False)
    saved = tool_servers(ok(dialog))
    assert [(s.name, s.enabled, s.disabled_tools) for s in saved] == [("notes", True, ("hang",)), ("web", False, ())]


def test_a_server_that_cannot_start_is_said_in_words_naming_it(qtbot):
    missing = McpServer(name="nope", command="no-such-program-for-draftscope")
    tab = open_tools(qtbot, Settings(mcp_servers=[missing.to_dict()])).tools
    qtbot.waitUntil(lambda: "could not be listed" in tab.tools_status.text(), timeout=LISTING_S * 1000)
    words = tab.tools_status.text()
    assert "'nope'" in words and "no-such-program-for-draftscope" in words and "not found" in words
    assert tab.tools_status.property("error") is True and tab.tool_list.topLevelItemCount() == 0


def test_a_server_is_added_with_the_form_refused_while_it_is_not_one(qtbot):
    dialog = open_tools(qtbot, Settings(mcp_servers=[WEB.to_dict()]))
    tab = dialog.tools
    qtbot.mouseClick(tab.findChild(type(tab.edit_button), "addToolServer"), Qt.MouseButton.LeftButton)
    form = tab.form
    assert isinstance(form, ServerForm) and form.isVisible() and not form.is_http()
    form.name_edit.setText("web")
    form.accept()
    assert form.isVisible() and "already in the list" in form.error_label.text()
    form.name_edit.setText("notes")
    form.accept()
    assert form.isVisible() and "neither a" in form.error_label.text()
    form.command_edit.setText(sys.executable)
    form.args_edit.setText(f"'{FIXTURE}' --flag 'two words'")
    form.env.add_row("NOTES_DIR", "/tmp/notes")
    form.accept()
    assert not form.isVisible()
    assert rows(tab.server_list)["notes"][1] and tab.current_name() == "notes"
    qtbot.waitUntil(lambda: "read_note" in rows(tab.tool_list), timeout=LISTING_S * 1000)  # listed on adding
    notes = tool_servers(ok(dialog))[1]
    assert (notes.command, notes.args, notes.env) == (
        sys.executable,
        (FIXTURE, "--flag", "two words"),
        {"NOTES_DIR": "/tmp/notes"},
    )


def test_editing_a_server_keeps_its_switches_and_can_make_it_a_url(qtbot):
    server = replace(NOTES, name="local", command="no-such-program-for-draftscope", args=(), always_allowed=("add",))
    dialog = open_tools(qtbot, Settings(mcp_servers=[server.to_dict()]))
    tab = dialog.tools
    tab.edit_server()
    form = tab.form
    assert form.name_edit.text() == "local" and form.command_edit.text() == "no-such-program-for-draftscope"
    form.kind.setCurrentIndex(form.kind.findData("http"))
    assert form.url_edit.isVisible() and not form.command_edit.isVisible()
    form.name_edit.setText("remote")
    form.url_edit.setText("ftp://example")
    form.accept()
    assert "http://" in form.error_label.text(), "a URL the client cannot speak to is refused"
    form.url_edit.setText("https://tools.example/mcp")
    form.headers.add_row("X-Key", "secret")
    form.accept()
    remote = tool_servers(ok(dialog))[0]
    assert (remote.name, remote.kind, remote.url, remote.command) == ("remote", "http", "https://tools.example/mcp", "")
    assert remote.headers == {"X-Key": "secret"} and remote.always_allowed == ("add",)


def test_mcp_servers_json_is_imported_pasted_or_from_a_file_and_a_bad_one_refused(qtbot, tmp_path):
    dialog = open_tools(qtbot, Settings())
    tab = dialog.tools
    tab.import_servers()
    form = tab.form
    assert isinstance(form, ImportForm)
    form.text.setPlainText('{"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}')
    form.accept()
    assert form.isVisible() and form.error_label.text().startswith("Not valid JSON")
    assert tab.model.servers == [], "nothing half-imported"
    path = tmp_path / "mcp.json"
    path.write_text(
        '{"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}, "files": {"command": "npx", "args": ["-y", "x"]}}}'
    )
    form.read_file(path)
    form.accept()
    assert not form.isVisible() and tab.note.text() == "Imported 2 servers: web, files"
    assert [s.name for s in tool_servers(ok(dialog))] == ["web", "files"]


def test_always_allowed_tools_are_listed_and_can_ask_again(qtbot):
    server = replace(WEB, always_allowed=("search", "fetch"))
    dialog = open_tools(qtbot, Settings(mcp_servers=[server.to_dict(), NOTES.to_dict()]))
    tab = dialog.tools
    assert [tab.allowed_list.item(i).text() for i in range(tab.allowed_list.count())] == ["web · search", "web · fetch"]
    assert not tab.ask_button.isEnabled(), "nothing chosen yet"
    tab.allowed_list.item(0).setSelected(True)
    qtbot.mouseClick(tab.ask_button, Qt.MouseButton.LeftButton)
    assert [tab.allowed_list.item(i).text() for i in range(tab.allowed_list.count())] == ["web · fetch"]
    tab.allowed_list.item(0).setSelected(True)
    tab.take_back()
    assert tab.allowed_none.isVisible() and not tab.allowed_list.isVisible()
    assert [s.always_allowed for s in tool_servers(ok(dialog))] == [(), ()]


def test_the_limits_round_trip_and_restore_defaults_keeps_the_servers(qtbot):
    dialog = open_tools(qtbot, Settings(mcp_servers=[WEB.to_dict()], tool_calls_per_answer=4, tool_timeout_s=20.0))
    tab = dialog.tools
    assert (tab.calls.value(), tab.timeout.value()) == (4, 20.0)
    tab.calls.setValue(25)
    tab.timeout.setValue(90)
    result = dialog.result_settings()
    assert (result.tool_calls_per_answer, result.tool_timeout_s) == (25, 90.0)
    dialog.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).click()
    result = ok(dialog)
    assert (result.tool_calls_per_answer, result.tool_timeout_s) == (10, 60.0)
    assert tool_servers(result) == [WEB], "the user's servers are theirs, not a default"


def test_removing_a_server_and_the_page_fits_a_laptop_screen(qtbot):
    long = replace(NOTES, name="a" * 40, args=("/a/very/long/path/" * 12,))
    dialog = open_tools(qtbot, Settings(mcp_servers=[long.to_dict(), WEB.to_dict()]))
    tab = dialog.tools
    scroll = dialog.tabs.currentWidget()
    assert isinstance(scroll, QScrollArea)
    assert dialog.width() <= 1280 - 16, "the dialog fits a 1280 or 1366 pixel wide screen"
    page = scroll.widget().minimumSizeHint().width()
    assert page <= scroll.viewport().width(), "a long name and command are elided, never scrolled sideways"
    tab.select("web")
    tab.remove_server()
    assert list(rows(tab.server_list)) == ["a" * 40] and "Removed web" in tab.note.text()
    assert [s.name for s in tool_servers(ok(dialog))] == ["a" * 40]
