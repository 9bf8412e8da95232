"""MCP tools in the terminal (issue 66): ``draftscope chat --mcp CONFIG`` asks before each call ("Run
notes.add {...}? [y]es / [n]o / [a]lways"), ``draftscope generate --mcp CONFIG --approve-tools`` runs them
and says each on stderr. A tiny random model with Qwen2.5's template, held to a call by ``--tool-choice``,
calls the real fixture MCP server (tests/toolbox/mcp_fixture_server.py) over stdio; its result is read
back and the model answers on. A server that does not start is named; no server outlives the command."""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from engine_fixtures import tiny_llama
from mcp_helpers import fixture_processes
from runtime_helpers import runtime_for

import draftscope.toolbox
from draftscope.cli import main
from draftscope.commands import chat
from draftscope.core.session import ChatSession
from draftscope.core.tool_turns import BAD_ARGUMENTS, DENIED, STOPPED
from draftscope.engine.engine import Engine

pytestmark = pytest.mark.usefixtures("one_thread")

QWEN_TEMPLATE = (Path(__file__).parent.parent / "data" / "qwen2.5_chat_template.jinja").read_text()
FIXTURE = Path(__file__).resolve().parent.parent / "toolbox" / "mcp_fixture_server.py"
# the fixture's tools a test leaves on (the user switches tools off in Settings): a random model held to
# a call picks any tool it is shown, and a note's name it makes up may run past the answer's length
FIXTURE_TOOLS = ("add", "read_note", "big_result", "crash", "hang", "fail", "env_value", "garbage", "pid")
QUESTION = "What is 2 + 3?"
FOLLOW_UP_TOKENS = 16
OPENAI_TOOLS = draftscope.toolbox.openai_tools


@pytest.fixture(scope="module")
def qwen_tokenizer(tokenizer):
    tools = copy.deepcopy(tokenizer)
    tools.chat_template = QWEN_TEMPLATE
    return tools


@pytest.fixture
def config(tmp_path, monkeypatch):
    """An mcpServers file with the fixture server as "notes", its tools but ``add`` and ``crash``
    switched off (a test may switch on others: ``config.offered``)."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": [str(FIXTURE)]}}}))
    made = SimpleNamespace(path=str(path), offered={"add", "crash"})
    read = draftscope.toolbox.read_mcp_config

    def switched_off(p):
        off = tuple(t for t in FIXTURE_TOOLS if t not in made.offered)
        return [replace(s, disabled_tools=off) for s in read(p)]

    monkeypatch.setattr(draftscope.toolbox, "read_mcp_config", switched_off)
    monkeypatch.setattr(draftscope.toolbox, "openai_tools", closed_tools)
    return made


def closed_tools(infos):
    """The tools as toolbox lists them, each held to its own arguments: held to a schema that lets it
    add keys, a random model writes keys of noise until its length limit."""
    listed, route = OPENAI_TOOLS(infos)
    for tool in listed:
        tool["function"]["parameters"]["additionalProperties"] = False
    return listed, route


def tiny_runtime(tokenizer, **settings):
    """A tiny random model: its EOS never comes (a required call ends with its grammar)."""
    engine = Engine(
        tiny_llama(len(tokenizer), seed=3, layers=1, hidden=32, sharpen=4.0, max_positions=4096), tokenizer, name="tiny"
    )
    engine.eos_ids = set()
    return runtime_for(engine, **{"max_new_tokens": 120, "temperature": 0.9, "seed": 5, **settings})


def watched(runtime, monkeypatch) -> list:
    """The commands load ``runtime``; the requests the engine is asked, in order. An answer to a tool's
    result is cut short (FOLLOW_UP_TOKENS): a random model's text, written for time only."""
    requests = []

    def session(rt):
        made = ChatSession(rt)
        made.events.answer_started.connect(requests.append)
        whole = made.answer_limit
        made.answer_limit = lambda: FOLLOW_UP_TOKENS if made.turns()[-1].role == "tool" else whole()
        return made

    monkeypatch.setattr(chat, "runtime_from_args", lambda args: runtime)
    monkeypatch.setattr("draftscope.core.session.ChatSession", session)
    return requests


EARLIER: set[int] = set()  # fixture servers of earlier tests (a cancelled listing ends its own later)


@pytest.fixture(autouse=True)
def _earlier_servers():
    EARLIER.clear()
    EARLIER.update(p.pid for p in fixture_processes())


def fixture_servers() -> list[psutil.Process]:
    """The fixture servers this test started that still run."""
    return [p for p in fixture_processes() if p.pid not in EARLIER]


def results(request) -> list[dict]:
    return [m for m in request.messages if m["role"] == "tool"]


def calls(request) -> list[dict]:
    return [c["function"] for m in request.messages for c in m.get("tool_calls", [])]


def test_generate_runs_a_required_call_on_the_server_and_answers(qwen_tokenizer, config, monkeypatch, capsys):
    """Held to a call, the random model calls one of the tools validly; it runs on the fixture server,
    its outcome is said on stderr, the result (the server's own answer) is read back, and the model
    answers again, free of the grammar, shown the same tools."""
    config.offered = {"add"}
    requests = watched(tiny_runtime(qwen_tokenizer), monkeypatch)
    argv = ["generate", QUESTION, "--mcp", config.path, "--approve-tools", "--tool-choice", "required"]
    assert main([*argv, "--quiet-stats", "--model", "tiny"]) == 0
    err = capsys.readouterr().err
    first, then = requests[0], requests[-1]
    assert first.grammar is not None and then.grammar is None and then.tools == first.tools
    made = calls(then)
    whole = [c for c in made if isinstance(c["arguments"], dict)]
    assert whole and all(c["name"] == "add" for c in made), made
    for call, result in zip(made, results(then)):
        if call in whole:
            assert f"[notes.add {json.dumps(call['arguments'])}] done in" in err, err
            assert result["content"] == str(call["arguments"]["a"] + call["arguments"]["b"]), "the server's sum"
        else:  # parallel calls go on until the length limit cuts one: it is not run
            assert result["content"] == BAD_ARGUMENTS and "[notes.add (not JSON)] (not run" in err
    assert not fixture_servers(), "the server's process ends with the command"


def test_generate_without_approve_tools_refuses_the_call_in_words(qwen_tokenizer, config, monkeypatch, capsys):
    requests = watched(tiny_runtime(qwen_tokenizer), monkeypatch)
    argv = ["generate", QUESTION, "--mcp", config.path, "--tool-choice", "add", "--quiet-stats", "--model", "tiny"]
    assert main(argv) == 0
    assert "not run: add --approve-tools to run the --mcp servers' tools" in capsys.readouterr().err
    assert [m["content"] for m in results(requests[-1])] == [DENIED], "the model answers without it"


class Typist:
    """The user at the chat's prompts: ``messages`` at "you>", ``words`` at each approval prompt (an
    exception is raised), then Ctrl-D."""

    def __init__(self, messages: list[str], words: list) -> None:
        self.messages, self.words, self.asked = list(messages), list(words), []

    def __call__(self, prompt: str = "") -> str:
        self.asked.append(prompt)
        if prompt.startswith("Run "):
            word = self.words.pop(0)
            if isinstance(word, BaseException):
                raise word
            return word
        if prompt.strip() == "you>" and self.messages:
            return self.messages.pop(0)
        raise EOFError


def chat_with(runtime, config, monkeypatch, typist, choice="add") -> list:
    requests = watched(runtime, monkeypatch)
    monkeypatch.setattr("builtins.input", typist)
    assert main(["chat", "--mcp", config.path, "--tool-choice", choice, "--model", "tiny"]) == 0
    return requests


def test_chat_asks_before_a_call_runs_and_the_model_reads_its_result(qwen_tokenizer, config, monkeypatch):
    typist = Typist([QUESTION], ["maybe", "y"])
    requests = chat_with(tiny_runtime(qwen_tokenizer), config, monkeypatch, typist)
    prompts = [p for p in typist.asked if p.startswith("Run ")]
    call = calls(requests[-1])[0]
    assert prompts[0] == f"Run notes.add {json.dumps(call['arguments'])}? [y]es / [n]o / [a]lways "
    assert len(prompts) == 2, "asked again until the answer is y, n or a"
    assert results(requests[-1])[0]["content"] == str(call["arguments"]["a"] + call["arguments"]["b"])
    assert len(requests) == 2, "the model answered the result (free of the grammar: no more calls)"


def test_chat_denial_and_always(qwen_tokenizer, config, monkeypatch):
    """n: not run, the model reads the denial; a: run, and the next call of that tool is not asked."""
    typist = Typist([QUESTION, "And 4 + 4?", "And 1 + 1?"], ["n", "a"])
    requests = chat_with(tiny_runtime(qwen_tokenizer), config, monkeypatch, typist)
    assert len([p for p in typist.asked if p.startswith("Run ")]) == 2, "the third message's call ran unasked"
    assert len(requests) == 6
    outcomes = [m["content"] for m in results(requests[-1])]
    assert len(outcomes) == 3 and outcomes[0] == DENIED and outcomes[1].lstrip("-").isdigit()
    assert outcomes[2].lstrip("-").isdigit()


def test_ctrl_d_at_the_prompt_stops_the_calls(qwen_tokenizer, config, monkeypatch, capsys):
    typist = Typist([QUESTION], [EOFError()])
    requests = chat_with(tiny_runtime(qwen_tokenizer), config, monkeypatch, typist)
    assert len(requests) == 1, "no answer after Stop"
    assert typist.asked[-1].strip() == "you>", "the user has the word again"
    assert '[notes.add {"a": ' in (err := capsys.readouterr().err) and f"] {STOPPED}" in err, err


def test_a_server_that_crashes_mid_call_gives_the_model_its_words(qwen_tokenizer, config, monkeypatch, capsys):
    requests = watched(tiny_runtime(qwen_tokenizer), monkeypatch)
    argv = ["generate", QUESTION, "--mcp", config.path, "--approve-tools", "--tool-choice", "crash"]
    assert main([*argv, "--quiet-stats", "--model", "tiny"]) == 0
    said = results(requests[-1])[0]["content"]
    assert "'notes'" in said and len(requests) == 2, said
    assert "[notes.crash {}] failed in" in capsys.readouterr().err


def test_a_server_that_does_not_start_is_named(qwen_tokenizer, tmp_path, monkeypatch, capsys):
    """One server of two does not start: it is named and the other serves; none starts: no tools, said
    before the model loads."""
    servers = {
        "notes": {"command": sys.executable, "args": [str(FIXTURE)]},
        "broken": {"command": "draftscope-no-such-program"},
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    requests = watched(tiny_runtime(qwen_tokenizer, max_new_tokens=8), monkeypatch)
    assert main(["generate", QUESTION, "--mcp", str(path), "--quiet-stats", "--model", "tiny"]) == 0
    assert "MCP server 'broken' did not start" in capsys.readouterr().err and requests[0].tools
    path.write_text(json.dumps({"mcpServers": {"broken": servers["broken"]}}))
    monkeypatch.setattr(chat, "runtime_from_args", lambda args: pytest.fail("the model was loaded"))
    assert main(["generate", QUESTION, "--mcp", str(path), "--model", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "MCP server 'broken' did not start" in err and "no tools to offer" in err
    assert not fixture_servers()


def test_a_tool_choice_no_server_offers_is_said_before_the_model_loads(config, monkeypatch, capsys):
    monkeypatch.setattr(chat, "runtime_from_args", lambda args: pytest.fail("the model was loaded"))
    assert main(["chat", "--mcp", config.path, "--tool-choice", "read_note", "--model", "tiny"]) == 2
    assert "--tool-choice read_note: tool_choice names 'read_note', which is not one" in capsys.readouterr().err
    assert not fixture_servers()


@pytest.mark.parametrize("failure", ["refused", "error"])
def test_a_failed_follow_up_answer_keeps_the_tools_result(qwen_tokenizer, monkeypatch, capsys, failure):
    """The answer after a tool's result fails (the prompt outgrew the context, or the engine failed):
    the result stays in the conversation; only a question left unanswered is taken back."""
    session = ChatSession(tiny_runtime(qwen_tokenizer))
    session.say(QUESTION)
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    session.say("", role="assistant", tool_fields={"tool_calls": [call]})
    session.say("5", role="tool", tool_fields={"tool_call_id": "c1", "name": "add"})

    def failing(session, args):
        if failure == "refused":
            raise ValueError("the prompt has 5,000 tokens")
        return SimpleNamespace(finish_reason="error", error="the engine broke", text="")

    monkeypatch.setattr(chat, "_answer", failing)
    assert chat._reply(session, SimpleNamespace()) is None
    assert [t.role for t in session.turns()] == ["user", "assistant", "tool"]
    session.drop_last()
    session.drop_last()  # the question alone, its answer failing
    assert chat._reply(session, SimpleNamespace()) is None
    assert session.turns() == [], "a question left unanswered is taken back"
