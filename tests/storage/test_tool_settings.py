"""The MCP servers and the tool calls' limits (issue 66) are settings like the others: saved in their
own section of the file, checked on load (a server that is not one is left out by name, the user's
other servers kept), and a change to them asks the window to start its tool host again."""

from __future__ import annotations

import json
from dataclasses import replace

from draftscope.storage import Settings, load_settings, save_settings
from draftscope.storage.settings import (
    MAX_TOOL_CALLS,
    Change,
    Section,
    allow_always,
    change_between,
    section_of,
    tool_servers,
)
from draftscope.toolbox.servers import McpServer

FILES = McpServer(name="files", command="npx", args=("-y", "server-files", "/home/me"), env={"DEBUG": "1"})
SEARCH = McpServer(name="search", url="http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer x"})


def test_the_defaults_hold_no_server_ten_calls_and_a_minute():
    s = Settings()
    assert (s.mcp_servers, s.tool_calls_per_answer, s.tool_timeout_s, s.problems()) == ([], 10, 60.0, [])
    assert [section_of(n) for n in ("mcp_servers", "tool_calls_per_answer", "tool_timeout_s")] == [Section.TOOLS] * 3
    assert change_between(s, replace(s, tool_timeout_s=5.0)) == Change.TOOLS


def test_servers_are_saved_in_the_tools_section_and_read_back_whole(tmp_path):
    off = replace(SEARCH, enabled=False, disabled_tools=("delete",), always_allowed=("find",))
    s = Settings(mcp_servers=[FILES.to_dict(), off.to_dict()], tool_calls_per_answer=3, tool_timeout_s=12.5)
    path = save_settings(s, tmp_path / "settings.json")
    saved = json.loads(path.read_text())
    assert set(saved["tools"]) == {"mcp_servers", "tool_calls_per_answer", "tool_timeout_s"}
    settings, notices = load_settings(path)
    assert notices == [] and tool_servers(settings) == [FILES, off]
    assert (settings.tool_calls_per_answer, settings.tool_timeout_s) == (3, 12.5)


def test_a_file_written_before_tools_loads_unchanged(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"version": 3, "sampling": {"top_k": 7}, "server": {"server_port": 9000}}')
    settings, notices = load_settings(path)
    assert notices == [] and (settings.top_k, settings.server_port) == (7, 9000)
    assert (settings.mcp_servers, settings.tool_calls_per_answer, settings.tool_timeout_s) == ([], 10, 60.0)


def test_a_broken_server_is_left_out_by_name_and_the_others_kept(tmp_path):
    path = tmp_path / "settings.json"
    servers = [
        FILES.to_dict(),
        {"name": "nothing", "command": "", "url": ""},  # neither a command nor a URL
        {"name": "badargs", "command": "x", "args": "not a list"},
        "not an object",
        {**SEARCH.to_dict(), "name": "files"},  # a second of one name
        SEARCH.to_dict(),
    ]
    path.write_text(json.dumps({"version": 3, "tools": {"mcp_servers": servers, "tool_calls_per_answer": 4}}))
    settings, notices = load_settings(path)
    assert tool_servers(settings) == [FILES, SEARCH] and settings.tool_calls_per_answer == 4
    assert len(notices) == 4, notices
    for name in ("'nothing'", "'badargs'", "'not an object'", "'files'"):
        assert any(name in n and "left out" in n for n in notices), (name, notices)


def test_limits_out_of_range_fall_back_with_a_notice(tmp_path):
    path = tmp_path / "settings.json"
    for tools, name in (
        ({"tool_calls_per_answer": 0}, "tool_calls_per_answer"),
        ({"tool_calls_per_answer": MAX_TOOL_CALLS + 1}, "tool_calls_per_answer"),
        ({"tool_timeout_s": 0.5}, "tool_timeout_s"),
        ({"tool_timeout_s": "fast"}, "tool_timeout_s"),
        ({"mcp_servers": {"files": {}}}, "mcp_servers"),
    ):
        path.write_text(json.dumps({"version": 3, "tools": tools}))
        settings, notices = load_settings(path)
        assert getattr(settings, name) == getattr(Settings(), name)
        assert len(notices) == 1 and repr(name) in notices[0], notices


def test_settings_refuse_two_servers_of_one_name_and_say_which():
    s = Settings(mcp_servers=[FILES.to_dict(), FILES.to_dict()])
    assert any(p.startswith("mcp_servers") and "files" in p for p in s.problems())


def test_always_allowing_a_tool_keeps_it_on_that_server_only():
    s = Settings(mcp_servers=[FILES.to_dict(), SEARCH.to_dict()])
    allowed = allow_always(s, "files", "read_file")
    assert [x.always_allowed for x in tool_servers(allowed)] == [("read_file",), ()]
    assert allow_always(allowed, "files", "read_file") is allowed, "already allowed: the same settings"
    assert allow_always(s, "nowhere", "read_file") is s
    assert change_between(s, allowed) == Change.TOOLS
