"""The calling loop as the window drives it (core/tool_turns.py over a ChatSession kept in the history):
a tiny random model with Qwen2.5's template, held to a call, calls the real fixture MCP server
(tests/toolbox/mcp_fixture_server.py) through a ToolHost; the result is kept in the history with the
answer's call, read back by the model's next answer, and still there in a new store on the same file.
Stop cancels a call that hangs; a server that dies mid-call gives the model the failure's words."""

from __future__ import annotations

import copy
import sys
import threading
import time
from pathlib import Path

import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.core.session import ChatSession
from draftscope.core.tool_turns import STOPPED, ToolTurns
from draftscope.engine.engine import Engine
from draftscope.storage import HistoryStore
from draftscope.toolbox import McpServer, ToolHost, openai_tools

pytestmark = pytest.mark.usefixtures("one_thread")

QWEN_TEMPLATE = (Path(__file__).parent.parent / "data" / "qwen2.5_chat_template.jinja").read_text()
FIXTURE = Path(__file__).resolve().parent.parent / "toolbox" / "mcp_fixture_server.py"
TOOLS = ("add", "read_note", "big_result", "crash", "hang", "fail", "env_value", "garbage", "pid")


@pytest.fixture(scope="module")
def host():
    """The fixture server as "notes", with only add, crash and hang on (a random model held to a call
    picks any tool it is shown)."""
    on = ("add", "crash", "hang")
    server = McpServer(
        "notes", command=sys.executable, args=(str(FIXTURE),), disabled_tools=tuple(t for t in TOOLS if t not in on)
    )
    tools = ToolHost([server], start_timeout_s=60, call_timeout_s=20)
    assert tools.start() == {}
    yield tools
    tools.close()


@pytest.fixture(scope="module")
def runtime(tokenizer):
    qwen = copy.deepcopy(tokenizer)
    qwen.chat_template = QWEN_TEMPLATE
    engine = Engine(
        tiny_llama(len(qwen), seed=3, layers=1, hidden=32, sharpen=4.0, max_positions=4096), qwen, name="tiny"
    )
    engine.eos_ids = set()  # a random model: a required call ends with its grammar
    return runtime_for(engine, max_new_tokens=120, temperature=0.9, seed=5)


def loop(runtime, host, tmp_path, choice: str):
    session = ChatSession(runtime, history=HistoryStore(tmp_path / "history.sqlite3"))
    listed, route = openai_tools(host.tools())
    for tool in listed:  # held to a schema that lets it add keys, a random model writes keys of noise
        tool["function"]["parameters"]["additionalProperties"] = False
    run = lambda server, tool, arguments, cancel: host.call(server, tool, arguments, cancel=cancel)  # noqa: E731
    return session, ToolTurns(session, listed, route, run, allowed=lambda s, t: True, choice=choice)


def answered(session: ChatSession, turns: ToolTurns, *, max_new_tokens: int | None = None):
    """One answer, its text read by the loop as a face shows it (calls held back), and its calls."""
    request = session.request(max_new_tokens=max_new_tokens, drafters=[])
    turns.prepare(request)
    show = lambda step: turns.said("".join(step.pieces))  # noqa: E731
    session.events.step.connect(show)
    try:
        session.run(request)
    finally:
        session.events.step.disconnect(show)
    turns.finish()
    return request, turns.after_answer()


def test_a_required_call_runs_on_the_server_and_is_kept_in_the_history(runtime, host, tmp_path):
    session, turns = loop(runtime, host, tmp_path, "add")
    session.say("What is 2 + 3?")
    first, calls = answered(session, turns)
    assert first.grammar is not None and [c.state for c in calls] == ["approved"]
    turns.run_approved()
    call = calls[0]
    assert call.state == "done" and call.result == str(call.arguments["a"] + call.arguments["b"])
    assert isinstance(call.message_id, int) and turns.wants_answer()
    then, more = answered(session, turns, max_new_tokens=16)
    assert then.grammar is None and then.tools == first.tools and more == []
    assert [m["role"] for m in then.messages] == ["user", "assistant", "tool"]
    assert then.messages[2] == {"role": "tool", "content": call.result, "tool_call_id": call.id, "name": "add"}
    prompt = runtime.engine.tokenizer.decode(runtime.engine.encode_chat(then.messages, then.tools))
    assert f"<tool_response>\n{call.result}\n</tool_response>" in prompt
    again = HistoryStore(tmp_path / "history.sqlite3").messages(session.conversation_id)
    assert [m.role for m in again] == ["user", "assistant", "tool", "assistant"], "kept after a restart"
    assert again[1].tool_fields["tool_calls"][0]["function"] == {"name": "add", "arguments": call.arguments}
    assert again[2].tool_fields["seconds"] == round(call.seconds, 3) > 0, "how long the call ran is kept"
    assert again[2].tool_fields | {"chars": 0, "seconds": 0} == {
        "tool_call_id": call.id,
        "name": "add",
        "server": "notes",
        "status": "ok",
        "chars": 0,
        "seconds": 0,
    }


def test_stop_cancels_a_call_that_hangs(runtime, host, tmp_path):
    session, turns = loop(runtime, host, tmp_path, "hang")
    session.say("Sleep.")
    _, calls = answered(session, turns)
    running = threading.Event()
    turns.events.changed.connect(lambda call: running.set() if call.state == "running" else None)
    worker = threading.Thread(target=turns.run_approved)
    began = time.monotonic()
    worker.start()
    assert running.wait(15), "the call's start, as a card hears it"
    turns.stop()
    worker.join(15)
    assert not worker.is_alive() and time.monotonic() - began < 15, "the hang did not hold the loop"
    assert calls[0].state == "stopped" and session.messages()[-1]["content"].startswith(STOPPED)
    assert not turns.wants_answer()


def test_a_server_that_dies_mid_call_gives_the_model_its_words(runtime, host, tmp_path):
    session, turns = loop(runtime, host, tmp_path, "crash")
    session.say("Crash.")
    answered(session, turns)
    turns.run_approved()
    assert turns.calls[0].state == "failed" and "'notes'" in turns.calls[0].result
    assert turns.wants_answer(), "the model reads the failure and answers"
    then, _ = answered(session, turns, max_new_tokens=8)
    assert "'notes'" in then.messages[-1]["content"] and then.messages[-1]["role"] == "tool"
