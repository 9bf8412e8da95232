"""Settings ▸ Tools' model without Qt (core/tool_settings.py): the servers edited, imported and
switched, their tools' listings kept while a server is reached the same way, and listing a real MCP
server's tools (tests/toolbox/mcp_fixture_server.py) that gives up at once when cancelled."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from draftscope.core.tool_settings import FAILED, LISTED, ToolServers, list_tools
from draftscope.toolbox.servers import McpServer

FIXTURE = str(Path(__file__).resolve().parents[1] / "toolbox" / "mcp_fixture_server.py")
FIXTURE_SERVER = McpServer(name="fixture", command=sys.executable, args=(FIXTURE,))
FILES = McpServer(name="files", command="npx", args=("-y", "server-files"))


def heard(model: ToolServers) -> list[str]:
    out: list[str] = []
    model.events.servers.connect(lambda: out.append("servers"))
    model.events.listing.connect(lambda name: out.append(f"listing {name}"))
    return out


def test_servers_are_added_edited_switched_and_removed_with_an_event_each():
    model = ToolServers([FILES])
    events = heard(model)
    with pytest.raises(ValueError, match="already in the list"):
        model.add(replace(FIXTURE_SERVER, name="files"))
    model.add(FIXTURE_SERVER)
    model.set_enabled("files", False)
    model.set_tool_enabled("files", "delete", False)
    model.edit("files", replace(model.find("files"), name="notes"))
    model.remove("fixture")
    assert events == ["servers"] * 5
    assert model.values() == [replace(FILES, name="notes", enabled=False, disabled_tools=("delete",)).to_dict()]
    model.set_tool_enabled("notes", "delete", True)
    assert model.find("notes").disabled_tools == ()


def test_a_listing_follows_a_rename_and_is_forgotten_when_the_server_is_reached_another_way():
    model = ToolServers([FILES])
    model.listed(FILES, [])
    model.edit("files", replace(FILES, name="notes"))
    assert model.listing("notes").state == LISTED and model.listing("files") is None
    model.edit("notes", replace(FILES, name="notes", args=("-y", "other")))
    assert model.listing("notes") is None, "another command: listed again"
    model.listed(FILES, [])  # an answer about a server no longer in the list is dropped
    assert model.listing("files") is None


def test_switched_off_tools_stay_shown_before_the_server_lists_them():
    model = ToolServers([replace(FILES, disabled_tools=("delete",))])
    rows = model.tool_rows("files")
    assert [(r.name, r.enabled, r.listed) for r in rows] == [("delete", False, False)]


def test_import_adds_servers_and_a_same_named_one_keeps_the_users_switches():
    model = ToolServers([replace(FILES, disabled_tools=("delete",), always_allowed=("read",))])
    text = '{"mcpServers": {"files": {"command": "uvx", "args": ["files"]}, "web": {"url": "http://127.0.0.1:9/mcp"}}}'
    words = model.import_json(text)
    assert "Imported 2 servers: files, web" in words and "files replaced" in words
    files = model.find("files")
    assert (files.command, files.disabled_tools, files.always_allowed) == ("uvx", ("delete",), ("read",))
    assert model.find("web").kind == "http"
    before = model.values()
    for bad in ("not json", '{"mcpServers": {"x": {"command": 3}}}', '{"mcpServers": {}}'):
        with pytest.raises(ValueError):
            model.import_json(bad)
    assert model.values() == before, "a bad text changes nothing"


def test_taking_back_an_always_allowed_tool():
    model = ToolServers([replace(FILES, always_allowed=("read", "list"))])
    assert model.always_allowed() == [("files", "read"), ("files", "list")]
    model.take_back("files", "read")
    assert model.always_allowed() == [("files", "list")]


def test_a_real_servers_tools_are_listed_with_their_descriptions():
    tools = list_tools(FIXTURE_SERVER, lambda: False)
    by_name = {t.name: t for t in tools}
    assert by_name["read_note"].description == "Read the note of that name."
    assert {"add", "crash", "hang"} <= set(by_name)


def test_a_server_that_does_not_start_is_said_in_words_naming_it():
    broken = McpServer(name="broken", command=sys.executable, args=(FIXTURE,), env={"MCP_FIXTURE_EXIT_AT_START": "1"})
    with pytest.raises(ValueError, match="broken"):
        list_tools(broken, lambda: False, timeout_s=20)
    model = ToolServers([broken])
    model.listing_failed(broken, "server 'broken' exited")
    assert model.listing("broken").state == FAILED


def test_listing_gives_up_at_once_when_cancelled():
    hanging = McpServer(name="garbage", command=sys.executable, args=(FIXTURE,), env={"MCP_FIXTURE_GARBAGE": "1"})
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(InterruptedError):
        list_tools(hanging, cancel.is_set, timeout_s=20)
    assert time.monotonic() - started < 2
