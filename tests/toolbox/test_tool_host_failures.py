"""A server's failure stays contained: one that does not start (no such command, exits, writes what is
not MCP) is named by start() while the others work; close() and the interpreter's exit leave no
process; a call during or after close ends in words; Settings' probe lists or says why not; a
streamable-HTTP server is listed and called, and named when it goes away."""

import subprocess
import sys
import threading
import time

import psutil
import pytest
from mcp_helpers import FIXTURE, START_S, alive, fixture_processes, fixture_server

from draftscope.toolbox import McpServer, ToolHost, probe_server


def test_servers_that_cannot_start_are_named_and_the_others_work():
    servers = [
        fixture_server("good"),
        McpServer("missing", command="draftscope-no-such-mcp-server"),
        fixture_server("quits", env={"MCP_FIXTURE_EXIT_AT_START": "1"}),
        McpServer("unfinished", command=""),
        fixture_server("off", enabled=False),
    ]
    with ToolHost(servers, start_timeout_s=START_S) as host:
        errors = host.start()
        assert set(errors) == {"missing", "quits", "unfinished"}
        assert (
            errors["missing"]
            == "server 'missing' could not start: the command 'draftscope-no-such-mcp-server' was not found"
        )
        assert errors["quits"].startswith("server 'quits' exited at start")
        assert "told to exit at start" in errors["quits"]  # its last words on stderr, kept, never printed
        assert errors["unfinished"].startswith("server 'unfinished': has neither")
        assert {t.server for t in host.tools()} == {"good"}
        assert host.call("good", "add", {"a": 1, "b": 2}).text == "3"
        assert host.errors() == errors
        refused = host.call("quits", "add", {"a": 1, "b": 2})
        assert refused.status == "failed" and refused.text.startswith("server 'quits' exited at start")
        assert host.call("off", "add", {}).text == "server 'off' is switched off"


def test_a_server_writing_what_is_not_mcp_is_named_with_what_it_wrote():
    with ToolHost([fixture_server("noisy", env={"MCP_FIXTURE_GARBAGE": "1"})], start_timeout_s=3) as host:
        began = time.monotonic()
        errors = host.start()
        assert time.monotonic() - began < 10
        assert errors["noisy"].startswith("server 'noisy' gave no MCP answer within 3 s")
        assert "'Welcome to the fixture server! (not JSON)'" in errors["noisy"]


def test_garbage_instead_of_an_answer_times_out_naming_it():
    with ToolHost([fixture_server("babble")], start_timeout_s=START_S) as host:
        assert host.start() == {}
        outcome = host.call("babble", "garbage", {}, timeout_s=1.5)
        assert outcome.status == "timeout"
        assert (
            "server 'babble' did not answer 'garbage'" in outcome.text and "this line is not JSON-RPC" in outcome.text
        )
        assert host.call("babble", "add", {"a": 5, "b": 5}).text == "10"


def test_close_leaves_no_process_even_with_a_call_hanging():
    before = {p.pid for p in fixture_processes()}
    stubborn = fixture_server("two", env={"MCP_FIXTURE_STUBBORN": "1"})  # ends only when signalled
    host = ToolHost([fixture_server("one"), stubborn], start_timeout_s=START_S)
    assert host.start() == {}
    pids = {p.pid for p in fixture_processes()} - before
    assert len(pids) == 2
    outcome = {}
    caller = threading.Thread(target=lambda: outcome.update(o=host.call("one", "hang", {"seconds": 600})))
    caller.start()
    host.close()
    caller.join(10)
    assert not caller.is_alive()
    assert outcome["o"].status in ("stopped", "failed") and "'one'" in outcome["o"].text
    assert alive(pids) == []
    host.close()  # idempotent
    after = host.call("two", "add", {"a": 1, "b": 1})
    assert after.status == "failed" and "closed" in after.text and "'two'" in after.text
    assert host.tools() == [] and host.start() == {
        "two": "server 'two': the tool host is closed",
        "one": "server 'one': the tool host is closed",
    }


EXITS_WITHOUT_CLOSE = f"""
import sys
from draftscope.toolbox import McpServer, ToolHost
stubborn = {{"MCP_FIXTURE_STUBBORN": "1"}}  # it would outlive its stdin: only the host's exit ends it
host = ToolHost([McpServer("left", command=sys.executable, args=({str(FIXTURE)!r},), env=stubborn)], start_timeout_s={START_S})
assert host.start() == {{}}
print(host.call("left", "pid", {{}}).text, flush=True)
"""


def test_the_servers_end_with_the_app_even_without_close():
    done = subprocess.run(
        [sys.executable, "-c", EXITS_WITHOUT_CLOSE], capture_output=True, text=True, timeout=START_S + 30
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""  # nothing of the server's printed over the app's terminal
    pid = int(done.stdout.strip())
    assert alive([pid]) == []


def test_probe_lists_every_tool_or_says_why_not():
    tools = probe_server(fixture_server("probe", disabled_tools=("crash",), enabled=False), timeout_s=START_S)
    assert {"add", "crash", "read_note"} <= {t.name for t in tools}  # off or not, Settings shows them all
    with pytest.raises(ValueError, match="server 'gone' could not start: the command 'draftscope-no-such-mcp-server'"):
        probe_server(McpServer("gone", command="draftscope-no-such-mcp-server"))
    with pytest.raises(ValueError, match="server 'bad': has neither"):
        probe_server(McpServer("bad"))


def test_a_streamable_http_server_is_listed_called_and_named_when_gone(http_fixture):
    process, url = http_fixture
    web = McpServer("web", url=url, headers={"X-Draftscope-Test": "1"})
    with ToolHost([web], start_timeout_s=START_S, call_timeout_s=10) as host:
        assert host.start() == {}
        assert "read_note" in {t.name for t in host.tools() if t.server == "web"}
        assert host.call("web", "add", {"a": 20, "b": 22}).text == "42"
        process.kill()
        process.wait(10)
        gone = host.call("web", "add", {"a": 1, "b": 1})
        assert gone.status == "failed" and gone.text.startswith("server 'web' closed the connection during the call")
        again = host.call("web", "add", {"a": 1, "b": 1})  # a reconnection, refused
        assert again.status == "failed" and again.text.startswith(f"server 'web' could not be reached at {url}")
    with pytest.raises(ValueError, match=f"server 'web' could not be reached at {url}"):
        probe_server(web, timeout_s=10)


MUTE = "import time; time.sleep(120)"  # a server's process that never answers MCP's first request


def mute_processes() -> list[int]:
    return alive([p.pid for p in psutil.Process().children(recursive=True) if MUTE in " ".join(p.cmdline())])


@pytest.mark.parametrize("by", ["stop", "close"])
def test_stop_or_close_during_a_servers_start_ends_the_call_at_once(by):
    """A call starts its server on demand; Stop (its cancel event) or the host's close while that
    start waits (up to its timeout) ends the call "stopped" at once, and close leaves no process."""
    host = ToolHost([McpServer("mute", command=sys.executable, args=("-c", MUTE))], start_timeout_s=60)
    cancel = threading.Event()
    cut = cancel.set if by == "stop" else host.close
    try:
        threading.Timer(1.0, cut).start()
        began = time.monotonic()
        outcome = host.call("mute", "add", {"a": 1}, cancel=cancel)
        assert time.monotonic() - began < 8, "the call waited for the start it was stopped in"
        assert outcome.status == "stopped" and "'mute'" in outcome.text and "while the server started" in outcome.text
    finally:
        began = time.monotonic()
        host.close()
        assert time.monotonic() - began < 15
    deadline = time.monotonic() + 15  # its process ends as the SDK's shutdown does (a kill after a grace)
    while mute_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not mute_processes()
