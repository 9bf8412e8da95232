"""The window's tool loop with a tiny real model and the real fixture MCP server (tests/toolbox/
mcp_fixture_server.py, over stdio): a call appears as a card waiting for the user, Approve runs it
and the model answers after its result, Deny, "Always for this tool" (kept in the settings: the next
call runs without asking), a server that dies mid-call named in words with the window still usable,
Stop, a restart showing the calls, a server that does not start, what is read ahead is what Send
sends, and no server process left once the window is closed.

A tiny random model calls no tool by itself: the first answer to each message is held to a named
tool's grammar (the loop's ``choice``); ``pid`` takes no arguments (the tools are offered strict, no
keys beyond their own), so its call is whole in a few tokens, and its result (the server's process
id) is checked against the process itself."""

import copy
import dataclasses
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")
pytest.importorskip("mcp")
psutil = pytest.importorskip("psutil")

from engine_fixtures import tiny_llama
from mcp_helpers import fixture_processes
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QPushButton
from runtime_helpers import runtime_for

from draftscope.core.tool_turns import DENIED
from draftscope.engine.engine import Engine
from draftscope.gui.chat.read_ahead import plan_read
from draftscope.gui.chat.tool_turns_qt import STARTING, opened_call
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore
from draftscope.toolbox.servers import McpServer

FIXTURE = Path(__file__).resolve().parents[1] / "toolbox" / "mcp_fixture_server.py"
QWEN_TEMPLATE = (Path(__file__).resolve().parents[1] / "data" / "qwen2.5_chat_template.jinja").read_text()
WAIT_MS = 60_000


UNUSED = ("add", "big_result", "fail", "env_value", "garbage")  # switched off: a shorter prompt to read


def fixture_server(name: str = "files", command: str = sys.executable) -> dict:
    return McpServer(name, command=command, args=(str(FIXTURE),), disabled_tools=UNUSED).to_dict()


@pytest.fixture(scope="module")
def tool_engine(tokenizer):
    """A tiny random model with Qwen's template (it shows tools); its EOS never comes (a required
    call ends with its grammar, a free answer at the length limit)."""
    qwen = copy.deepcopy(tokenizer)
    qwen.chat_template = QWEN_TEMPLATE
    model = tiny_llama(len(qwen), seed=3, layers=1, hidden=32, sharpen=4.0, max_positions=4096)
    engine = Engine(model, qwen, name="tiny")
    engine.eos_ids = set()
    return engine


def tool_window(qtbot, engine, db, *, choice: str | None = "pid", servers=None, **settings) -> MainWindow:
    """A window whose own tool host runs ``servers`` (default: the fixture server as "files"), ready."""
    servers = [fixture_server()] if servers is None else servers
    settings = {"max_new_tokens": 80, "tool_timeout_s": 20, **settings}
    runtime = runtime_for(engine, mcp_servers=servers, **settings)
    window = MainWindow(runtime, HistoryStore(db))
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.tool_loop.host.ready, timeout=WAIT_MS):
        window.show()
    if choice is not None:
        window.tool_loop.choice = choice
        window.tool_loop.host.tools = [strict(t) for t in window.tool_loop.host.tools]
    return window


def strict(tool: dict) -> dict:
    """A tool whose arguments take no keys beyond its own (as a strict server declares them): a random
    model held to its grammar writes ``pid``'s call as ``{}``, not a key of random text."""
    tool = copy.deepcopy(tool)
    tool["function"]["parameters"]["additionalProperties"] = False
    return tool


def send(window: MainWindow, text: str) -> list:
    """Send ``text``; the requests the worker is handed from now on."""
    requests = []
    window.request_generation.connect(requests.append)
    window.chat_input.setPlainText(text)
    window.send()
    return requests


def asking(qtbot, window: MainWindow):
    qtbot.waitUntil(lambda: any(c.state == "asking" for c in window.tool_loop.live_calls().values()), timeout=WAIT_MS)
    return next(c for c in window.tool_loop.live_calls().values() if c.state == "asking")


def click(window: MainWindow, href: str) -> None:
    window.chat_view.anchorClicked.emit(QUrl(href))


def idle(qtbot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: not window.streaming, timeout=WAIT_MS)
    assert window.findChild(QPushButton, "sendButton").isEnabled()


def kept(window: MainWindow) -> list:
    return window.history.messages(window.conversation_id)


def test_approve_runs_the_call_and_the_model_answers_after_its_result(qtbot, tool_engine, tmp_path):
    earlier = {p.pid for p in fixture_processes()}  # another test's (a cancelled listing ends its own later)
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3")
    requests = send(window, "What is the tool server's process id?")
    call = asking(qtbot, window)
    text = window.chat_view.toPlainText()
    assert "pid" in text and "on files" in text and "(no arguments)" in text and "waits for your approval" in text
    assert "Waiting for your approval: files.pid" in window.statusBar().currentMessage()
    assert "<tool_call>" not in text, "the call shows as a card, not as the text the model wrote"
    assert window.findChild(QPushButton, "stopButton").isEnabled(), "a call waiting: the loop can be stopped"
    click(window, f"tool:approve/{call.id}")
    idle(qtbot, window)

    messages = kept(window)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1].tool_fields["tool_calls"][0]["function"]["name"] == "pid"
    result = messages[2]
    assert result.tool_fields["status"] == "ok" and result.tool_fields["server"] == "files"
    assert int(result.content) in {p.pid for p in fixture_processes()}, "the result is the running server's"
    assert len(requests) == 2 and requests[1].messages[-1]["role"] == "tool"
    assert requests[1].messages[-1]["content"] == result.content, "the model answers after reading the result"
    assert requests[1].tools == requests[0].tools, "every answer of the loop is shown the same tools"
    text = window.chat_view.toPlainText()
    assert "done" in text and "show result (" in text and "waits for your approval" not in text
    assert "Waiting for your approval" not in window.statusBar().currentMessage()

    window.close()  # the window's own servers end with it
    qtbot.waitUntil(lambda: not {p.pid for p in fixture_processes()} - earlier, timeout=20_000)


def test_deny_keeps_the_denial_and_the_model_answers_without_the_call(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3")
    requests = send(window, "What is the process id?")
    click(window, f"tool:deny/{asking(qtbot, window).id}")
    idle(qtbot, window)
    messages = kept(window)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].content == DENIED and messages[2].tool_fields["status"] == "denied"
    assert requests[1].messages[-1]["content"] == DENIED
    assert "denied: not run" in window.chat_view.toPlainText()


def test_always_for_this_tool_is_kept_and_the_next_call_runs_without_asking(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3")
    send(window, "What is the process id?")
    call = asking(qtbot, window)
    with qtbot.waitSignal(window.tool_loop.settings_changed, timeout=WAIT_MS):
        click(window, f"tool:always/{call.id}")
    idle(qtbot, window)
    assert window.settings.mcp_servers[0]["always_allowed"] == ["pid"]

    asked = []
    window.tool_loop.host.ready.connect(lambda: asked.append("restarted"))  # nothing restarts for it
    send(window, "And again?")
    qtbot.waitUntil(lambda: len([m for m in kept(window) if m.role == "tool"]) == 2, timeout=WAIT_MS)
    assert not any(c.state == "asking" for c in window.tool_loop.live_calls().values())
    idle(qtbot, window)
    results = [m for m in kept(window) if m.role == "tool"]
    assert [r.tool_fields["status"] for r in results] == ["ok", "ok"] and not asked


def test_a_server_that_dies_mid_call_is_named_and_the_window_stays_usable(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3", choice="crash")
    send(window, "Crash, please")
    click(window, f"tool:approve/{asking(qtbot, window).id}")
    idle(qtbot, window)
    failure = next(m for m in kept(window) if m.role == "tool")
    assert failure.tool_fields["status"] == "failed" and "files" in failure.content
    assert "failed" in window.chat_view.toPlainText() and "'files'" in window.chat_view.toPlainText()
    assert "files" in window.statusBar().currentMessage()
    assert kept(window)[-1].role == "assistant", "the model answered, told of the failure"

    window.tool_loop.choice = "pid"  # the next call starts the server again
    send(window, "Try another tool")
    click(window, f"tool:approve/{asking(qtbot, window).id}")
    idle(qtbot, window)
    assert [m for m in kept(window) if m.role == "tool"][-1].tool_fields["status"] == "ok"


def test_stop_while_a_call_waits_ends_the_loop(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3")
    send(window, "What is the process id?")
    asking(qtbot, window)
    qtbot.mouseClick(window.findChild(QPushButton, "stopButton"), qtbot_left())
    idle(qtbot, window)
    messages = kept(window)
    assert [m.role for m in messages] == ["user", "assistant", "tool"], "no answer follows a Stop"
    assert messages[-1].tool_fields["status"] == "stopped"
    assert "stopped" in window.chat_view.toPlainText()
    assert not window.findChild(QPushButton, "stopButton").isEnabled()


def test_stop_while_a_call_runs_cancels_it_on_the_server(qtbot, tool_engine, tmp_path):
    """The call runs the server's ``hang`` for a minute; Stop ends it at once, and the loop with it."""
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3")
    host = window.tool_loop.host
    real = host.call
    host.call = lambda server, tool, arguments, cancel, **kw: real(server, "hang", {"seconds": 60}, cancel, **kw)
    send(window, "What is the process id?")
    call = asking(qtbot, window)
    click(window, f"tool:approve/{call.id}")
    qtbot.waitUntil(lambda: call.state == "running", timeout=WAIT_MS)
    qtbot.mouseClick(window.findChild(QPushButton, "stopButton"), qtbot_left())
    qtbot.waitUntil(lambda: not window.streaming, timeout=15_000)
    messages = kept(window)
    assert [m.role for m in messages] == ["user", "assistant", "tool"] and call.seconds < 30
    assert messages[-1].tool_fields["status"] == "stopped"
    assert "stopped" in window.chat_view.toPlainText()


def test_a_restart_shows_the_conversations_calls(qtbot, tool_engine, tmp_path):
    db = tmp_path / "h.sqlite3"
    window = tool_window(qtbot, tool_engine, db)
    send(window, "What is the process id?")
    click(window, f"tool:approve/{asking(qtbot, window).id}")
    idle(qtbot, window)
    conversation = window.conversation_id
    window.close()

    again = tool_window(qtbot, tool_engine, db, servers=[])  # a new window on the same history file
    again.show_conversation(conversation)
    text = again.chat_view.toPlainText()
    assert "pid" in text and "on files" in text and "done" in text and "show result (" in text
    model_reads = again.session.messages()
    assert [m["role"] for m in model_reads] == ["user", "assistant", "tool", "assistant"]
    assert model_reads[1]["tool_calls"][0]["function"]["name"] == "pid" and "server" not in model_reads[2]


def test_what_is_read_ahead_is_what_send_sends(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3", choice=None)
    offered = window.tool_loop.offered()
    assert offered and {t["function"]["name"] for t in offered} >= {"pid", "read_note", "crash"}
    text = "Read me the harbour note please"
    plan = plan_read(window.session, text + " ", [], None, offered)
    requests = send(window, text)
    idle(qtbot, window)
    sent = tool_engine.encode_chat(requests[0].messages, requests[0].tools)
    assert requests[0].tools == offered and len(plan.ids) > 100
    assert sent[: len(plan.ids)] == plan.ids, "the read ahead read the prompt Send sent, tools and all"


def test_a_server_that_does_not_start_is_named_and_answers_go_on_without_tools(qtbot, tool_engine, tmp_path):
    window = tool_window(
        qtbot, tool_engine, tmp_path / "h.sqlite3", servers=[fixture_server("ghost", "/nonexistent/mcp-server")]
    )
    assert "ghost" in window.statusBar().currentMessage()
    assert window.tool_loop.offered() is None
    requests = send(window, "Hello")
    idle(qtbot, window)
    assert requests[0].tools is None and [m.role for m in kept(window)] == ["user", "assistant"]


def test_stop_inside_a_call_keeps_no_call_text_and_offers_no_continue(qtbot, tool_engine, tmp_path):
    """Stop once the answer has opened a call (its name written, its arguments not): the answer ends
    there, with neither the cut call's text nor Continue."""
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3", choice="read_note")
    stopped = []

    def stop_inside_the_call(_steps) -> None:
        turns = window.tool_loop.turns
        if not stopped and turns is not None and opened_call(turns.reader):
            stopped.append(True)
            window.stop()

    window.answer_signals.steps.connect(stop_inside_the_call)
    send(window, "Read the harbour note")
    idle(qtbot, window)
    assert stopped
    messages = kept(window)
    assert [m.role for m in messages] == ["user", "assistant"], "a cut call is no call: nothing ran"
    assert "<tool_call>" not in messages[1].content and '"name"' not in messages[1].content
    text = window.chat_view.toPlainText()
    assert "<tool_call>" not in text and '"name"' not in text and "Continue" not in text


def test_the_length_limit_inside_a_call_keeps_no_call_text(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3", choice="read_note", max_new_tokens=12)
    send(window, "Read the harbour note")
    idle(qtbot, window)
    messages = kept(window)
    assert messages[-1].stats["finish_reason"] == "length" and messages[-1].role == "assistant"
    assert "<tool_call>" not in messages[-1].content and '"name"' not in messages[-1].content
    text = window.chat_view.toPlainText()
    assert "<tool_call>" not in text and '"name"' not in text and "Continue" not in text


def test_continue_shows_the_tools_the_answer_was_shown(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3", choice=None, max_new_tokens=12)
    requests = send(window, "Tell me about the harbour")
    idle(qtbot, window)
    answer = kept(window)[-1]
    assert answer.stats["finish_reason"] == "length" and "Continue" in window.chat_view.toPlainText()
    click(window, f"action:continue/{answer.id}")
    idle(qtbot, window)
    assert len(requests) == 2 and requests[1].tools == requests[0].tools == window.tool_loop.offered()


def test_a_message_sent_while_the_servers_start_waits_for_their_tools(qtbot, tool_engine, tmp_path):
    runtime = runtime_for(tool_engine, max_new_tokens=20, mcp_servers=[fixture_server()], tool_timeout_s=20)
    window = MainWindow(runtime, HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.tool_loop.host.starting, timeout=WAIT_MS)
    requests = send(window, "Hello")
    assert STARTING in window.statusBar().currentMessage() and window.streaming
    assert not requests, "the answer waits for the servers"
    idle(qtbot, window)
    assert requests and requests[0].tools, "the answer was shown the servers' tools"


def test_the_call_timeout_is_read_at_each_call(qtbot, tool_engine, tmp_path):
    """Settings ▸ Tools' call timeout, changed after the servers started, bounds the next call."""
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3")
    host = window.tool_loop.host
    real = host.call
    host.call = lambda server, tool, arguments, cancel, **kw: real(server, "hang", {"seconds": 60}, cancel, **kw)
    window.settings.tool_timeout_s = 1.0
    send(window, "What is the process id?")
    call = asking(qtbot, window)
    click(window, f"tool:approve/{call.id}")
    qtbot.waitUntil(lambda: call.state == "timeout", timeout=WAIT_MS)
    assert call.seconds < 10
    idle(qtbot, window)


def test_only_a_change_of_servers_starts_them_again(qtbot, tool_engine, tmp_path):
    window = tool_window(qtbot, tool_engine, tmp_path / "h.sqlite3", choice=None)
    tool_host, settings = window.tool_loop.host, window.settings
    running = tool_host.host
    allowed = [dict(settings.mcp_servers[0], always_allowed=["pid"])]
    tool_host.apply(dataclasses.replace(settings, tool_calls_per_answer=3, tool_timeout_s=5, mcp_servers=allowed))
    assert tool_host.host is running and not tool_host.starting and tool_host.call_timeout_s == 5
    with qtbot.waitSignal(tool_host.ready, timeout=WAIT_MS):
        tool_host.apply(dataclasses.replace(settings, mcp_servers=[fixture_server("other")]))
    assert tool_host.host is not running and {s for s, _ in tool_host.route.values()} == {"other"}


def qtbot_left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton
