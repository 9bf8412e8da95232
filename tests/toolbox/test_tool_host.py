"""The tool host against the real fixture MCP server (stdio): its tools listed, calls and their results
(1 MB whole), a tool's own error, a hang cut at its timeout, a cancel, a crash mid-call named and the
server started again at the next call."""

import threading
import time

import psutil
import pytest
from mcp_helpers import START_S, fixture_server

from draftscope.toolbox import ToolHost, ToolInfo, openai_tools


@pytest.fixture(scope="module")
def host():
    notes = fixture_server("notes", env={"FIXTURE_SECRET": "kept"}, disabled_tools=("pid",))
    with ToolHost([notes], start_timeout_s=START_S, call_timeout_s=20) as started:
        assert started.start() == {}
        yield started


def test_tools_are_listed_with_descriptions_and_schemas(host):
    tools = {t.name: t for t in host.tools()}
    assert {"add", "read_note", "big_result", "crash", "hang", "fail"} <= set(tools)
    assert "pid" not in tools  # switched off by the user
    add = tools["add"]
    assert isinstance(add, ToolInfo) and (add.server, add.description) == ("notes", "Add two whole numbers.")
    assert add.input_schema["required"] == ["a", "b"]
    openai, route = openai_tools(host.tools())
    assert route["read_note"] == ("notes", "read_note") and len(openai) == len(tools)


def test_a_call_returns_its_result(host):
    outcome = host.call("notes", "add", {"a": 2, "b": 40})
    assert (outcome.status, outcome.text) == ("ok", "42")
    note = host.call("notes", "read_note", {"name": "harbour"})
    assert note.status == "ok" and "The lighthouse keeper counted 41 gulls." in note.text.splitlines()
    assert 0 < note.seconds < 20


def test_the_servers_environment_is_its_own_plus_what_the_user_set(host, monkeypatch):
    assert host.call("notes", "env_value", {"name": "FIXTURE_SECRET"}).text == "kept"
    # the SDK passes only a safe part of the app's environment (PATH, HOME...), not its secrets
    assert host.call("notes", "env_value", {"name": "DRAFTSCOPE_CONFIG_DIR"}).text == ""


def test_a_result_of_one_megabyte_comes_back_whole(host):
    outcome = host.call("notes", "big_result", {"kilobytes": 1024})
    assert outcome.status == "ok"
    lines = outcome.text.split("\n")
    assert len(lines) == 1024 * 16 + 1 and lines[-1] == "END"
    assert lines[0].startswith("00000000 ") and lines[-2].startswith(f"{1024 * 16 - 1:08d} ")
    assert len(outcome.text) >= 1024 * 1024


def test_a_tools_own_error_is_an_error_naming_the_server(host):
    outcome = host.call("notes", "fail", {})
    assert outcome.status == "error"
    assert "'notes'" in outcome.text and "the fixture failed on purpose" in outcome.text
    unknown = host.call("notes", "no_such_tool", {})
    assert unknown.status == "error" and "'notes'" in unknown.text


def test_a_hang_times_out_within_its_timeout_and_the_server_stays_usable(host):
    outcome = host.call("notes", "hang", {"seconds": 60}, timeout_s=1.0)
    assert outcome.status == "timeout"
    assert "server 'notes' did not answer 'hang' within 1 s" in outcome.text
    assert 1.0 <= outcome.seconds < 5
    assert host.call("notes", "add", {"a": 1, "b": 1}).text == "2"
    assert host.errors() == {}


def test_a_cancel_stops_a_call_under_way(host):
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    outcome = host.call("notes", "hang", {"seconds": 60}, cancel=cancel)
    assert outcome.status == "stopped" and "'notes'" in outcome.text and outcome.seconds < 5
    assert host.call("notes", "add", {"a": 2, "b": 2}).text == "4"


def test_calls_from_several_threads_each_get_their_own_answer(host):
    outcomes = {}

    def ask(n):
        outcomes[n] = host.call("notes", "add", {"a": n, "b": 1000})

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert {n: o.text for n, o in outcomes.items()} == {n: str(n + 1000) for n in range(8)}


def test_what_cannot_be_called_is_said_not_raised(host):
    assert "'elsewhere' is not one of the MCP servers" in host.call("elsewhere", "add", {}).text
    off = host.call("notes", "pid", {})
    assert (off.status, off.text) == ("failed", "tool 'pid' of server 'notes' is switched off")


def test_a_crash_mid_call_is_named_and_the_next_call_starts_the_server_again():
    host = ToolHost([fixture_server("crashy")], start_timeout_s=START_S, call_timeout_s=20)
    try:
        assert host.start() == {}
        first_pid = host.call("crashy", "pid", {}).text
        outcome = host.call("crashy", "crash", {})
        assert outcome.status == "failed"
        assert outcome.text.startswith("server 'crashy' stopped during the call to 'crash'")
        assert "crashing on purpose" in outcome.text  # its last words on stderr
        assert "crashy" in host.errors()
        again = host.call("crashy", "add", {"a": 3, "b": 4})
        assert (again.status, again.text) == ("ok", "7")
        assert host.call("crashy", "pid", {}).text != first_pid
        assert host.errors() == {}
    finally:
        host.close()


def test_a_server_killed_while_idle_is_named_and_started_again_at_its_next_call():
    host = ToolHost([fixture_server("idle")], start_timeout_s=START_S, call_timeout_s=20)
    try:
        assert host.start() == {}
        pid = int(host.call("idle", "pid", {}).text)
        psutil.Process(pid).kill()
        deadline = time.monotonic() + 10  # its stderr's end is heard on the host's thread
        while "idle" not in host.errors() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.errors()["idle"].startswith("server 'idle' stopped")
        assert {t.server for t in host.tools()} == {"idle"}  # its tools stay offered: a call restarts it
        again = host.call("idle", "add", {"a": 1, "b": 1})
        assert (again.status, again.text) == ("ok", "2")
        assert host.errors() == {}
    finally:
        host.close()
