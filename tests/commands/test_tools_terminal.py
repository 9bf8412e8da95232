"""Tools in the terminal (issue 65): ``draftscope generate --tools FILE`` prints the answer's calls as
JSON lines, ``draftscope chat --tools FILE`` shows each call, asks its result and hands it back to the
model as a tool message. A tiny random model with Qwen2.5's chat template (shipped in tests/data)
calls validly where a call is required, because the grammar holds it; a bad file is said before
the model loads."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.cli import main
from draftscope.commands import chat
from draftscope.commands.tool_loop import NO_RESULT
from draftscope.commands.tool_options import MAX_CALLS_PER_MESSAGE, fit_tools, read_tools
from draftscope.core.session import ChatSession
from draftscope.engine.engine import Engine

pytestmark = pytest.mark.usefixtures("one_thread")

QWEN_TEMPLATE = (Path(__file__).parent.parent / "data" / "qwen2.5_chat_template.jinja").read_text()
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"enum": ["Paris", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 9},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
FLAG = {
    "type": "function",
    "function": {
        "name": "set_flag",
        "parameters": {
            "type": "object",
            "properties": {"on": {"type": "boolean"}},
            "required": ["on"],
            "additionalProperties": False,
        },
    },
}
QUESTION = "The weather in Paris?"
RESULT = "Sunny, 24 C"


@pytest.fixture(scope="module")
def qwen_tokenizer(tokenizer):
    tools = copy.deepcopy(tokenizer)
    tools.chat_template = QWEN_TEMPLATE
    return tools


def tiny_runtime(tokenizer, **settings):
    """A runtime over a tiny random model: its EOS never comes (a required call ends with its grammar)."""
    engine = Engine(
        tiny_llama(len(tokenizer), seed=3, layers=1, hidden=32, sharpen=4.0, max_positions=4096), tokenizer, name="tiny"
    )
    engine.eos_ids = set()
    return runtime_for(engine, **{"max_new_tokens": 120, "temperature": 0.9, "seed": 5, **settings})


@pytest.fixture
def tools_file(tmp_path):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([WEATHER, FLAG]))
    return path


def loaded(monkeypatch, runtime):
    """``draftscope generate`` and ``chat`` load ``runtime`` instead of a model named on the line."""
    monkeypatch.setattr(chat, "runtime_from_args", lambda args: runtime)


def check_call(call: dict) -> None:
    assert set(call) == {"name", "arguments"}
    if call["name"] == "get_weather":
        assert call["arguments"]["city"] in {"Paris", "Oslo"} and call["arguments"]["days"] >= 1
    else:
        assert call["name"] == "set_flag" and isinstance(call["arguments"]["on"], bool)


def test_generate_prints_a_required_call_as_json(qwen_tokenizer, tools_file, monkeypatch, capsys):
    """A random model's free text is noise; held to the tools' grammar it writes calls, printed a JSON
    object a line, and nothing of the call's markup is printed as text."""
    loaded(monkeypatch, tiny_runtime(qwen_tokenizer))
    argv = ["generate", QUESTION, "--tools", str(tools_file), "--tool-choice", "required", "--quiet-stats"]
    assert main([*argv, "--model", "tiny"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and "<tool_call>" not in "".join(lines)
    for line in lines:
        check_call(json.loads(line))


def test_generate_with_a_named_tool_calls_that_one_once(qwen_tokenizer, tools_file, monkeypatch, capsys):
    loaded(monkeypatch, tiny_runtime(qwen_tokenizer, seed=2))
    argv = ["generate", QUESTION, "--tools", str(tools_file), "--tool-choice", "set_flag", "--quiet-stats"]
    assert main([*argv, "--model", "tiny"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["name"] == "set_flag"
    check_call(json.loads(lines[0]))


@pytest.mark.parametrize(
    ("content", "choice", "words"),
    [
        (None, None, "No such file"),
        ("[{oops", None, "Expecting property name"),
        ('{"functions": []}', None, "a list of tools"),
        ("[]", None, "a list of tools"),
        ('[{"type": "function", "function": {"name": "bad name!"}}]', None, "tools[0].function.name"),
        (json.dumps([WEATHER, WEATHER]), None, "two tools are named 'get_weather'"),
        (json.dumps({"tools": [WEATHER]}), "set_flag", "--tool-choice set_flag: tool_choice names 'set_flag'"),
    ],
)
def test_a_bad_tools_file_is_named_before_the_model_loads(content, choice, words, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(chat, "runtime_from_args", lambda args: pytest.fail("the model was loaded"))
    path = tmp_path / "tools.json"
    if content is not None:
        path.write_text(content)
    for command in ("generate", "chat"):
        argv = [command, *([QUESTION] if command == "generate" else []), "--tools", str(path)]
        assert main([*argv, *(["--tool-choice", choice] if choice else []), "--model", "tiny"]) == 2
        err = capsys.readouterr().err
        assert words in err and (choice or str(path)) in err, err


def test_a_tool_choice_without_tools_is_refused(tools_file, monkeypatch, capsys):
    monkeypatch.setattr(chat, "runtime_from_args", lambda args: pytest.fail("the model was loaded"))
    assert main(["generate", QUESTION, "--tool-choice", "required", "--model", "tiny"]) == 2
    assert "--tool-choice required: there are no tools" in capsys.readouterr().err
    assert main(["generate", QUESTION, "--suffix", "x", "--tools", str(tools_file), "--model", "tiny"]) == 2
    assert "no --tools" in capsys.readouterr().err, "a fill-in-the-middle prompt has no template to show tools"


def test_a_model_whose_template_has_no_tools_is_told_before_answering(tokenizer, tools_file, monkeypatch, capsys):
    """ChatML alone never shows tools: the server's words, before any answer (none starts)."""
    loaded(monkeypatch, tiny_runtime(tokenizer))
    assert main(["generate", QUESTION, "--tools", str(tools_file), "--model", "tiny"]) == 2
    said = capsys.readouterr()
    assert "this model's chat template has no tools" in said.err and not said.out
    loaded(monkeypatch, tiny_runtime(tokenizer))
    monkeypatch.setattr("builtins.input", lambda prompt="": pytest.fail("the chat asked before it said so"))
    assert main(["chat", "--tools", str(tools_file), "--model", "tiny"]) == 2
    assert "this model's chat template has no tools" in capsys.readouterr().err


def test_generate_refuses_a_schema_and_a_required_call_together(qwen_tokenizer, tools_file, tmp_path, monkeypatch):
    (tmp_path / "schema.json").write_text("{}")
    loaded(monkeypatch, tiny_runtime(qwen_tokenizer))
    argv = ["generate", QUESTION, "--tools", str(tools_file), "--tool-choice", "required"]
    assert main([*argv, "--json-schema", str(tmp_path / "schema.json"), "--model", "tiny"]) == 2


class Typist:
    """The user at the chat's prompts: the question once, then the result for every call, then Ctrl-D."""

    def __init__(self, result: str = RESULT) -> None:
        self.result, self.asked = result, []

    def __call__(self, prompt: str = "") -> str:
        self.asked.append(prompt)
        if prompt.endswith("result> "):
            return self.result
        if sum(p.strip() == "you>" for p in self.asked) == 1:
            return QUESTION
        raise EOFError


def chat_through_input(runtime, tools_file, choice, monkeypatch, typist):
    """``draftscope chat --tools FILE --tool-choice CHOICE`` typed into; the requests the engine was asked."""
    requests, sessions = [], []
    monkeypatch.setattr("draftscope.core.session.ChatSession", lambda rt: watched(ChatSession(rt), requests, sessions))
    loaded(monkeypatch, runtime)
    monkeypatch.setattr("builtins.input", typist)
    assert main(["chat", "--tools", str(tools_file), "--tool-choice", choice, "--model", "tiny"]) == 0
    typist.session = sessions[0]
    return requests


def watched(session, requests, sessions):
    session.events.answer_started.connect(requests.append)
    sessions.append(session)
    return session


def test_chat_shows_the_call_and_the_model_reads_its_result(qwen_tokenizer, tools_file, monkeypatch, capsys):
    """The call is shown, its result asked; the next answer's prompt holds the call as the assistant's
    tool_calls and the result as a tool message (Qwen's <tool_response>), and is free of the grammar."""
    runtime, typist = tiny_runtime(qwen_tokenizer), Typist()
    requests = chat_through_input(runtime, tools_file, "get_weather", monkeypatch, typist)
    out = capsys.readouterr().out
    assert "[call] get_weather {" in out and typist.asked.count("get_weather result> ") == 1
    first, then = requests
    assert first.grammar is not None and then.grammar is None, "required holds for the first answer only"
    assert [m["role"] for m in then.messages] == ["user", "assistant", "tool"]
    call = then.messages[1]["tool_calls"][0]
    assert then.messages[2] == {"role": "tool", "content": RESULT, "tool_call_id": call["id"], "name": "get_weather"}
    engine = runtime.engine
    read = engine.tokenizer.decode(engine.encode_chat(then.messages, then.tools))
    assert f"<tool_response>\n{RESULT}\n</tool_response>" in read
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": ' in read
    assert "<tools>" in read, "the follow-up shows the tools too"


def test_an_empty_result_is_no_result(qwen_tokenizer, tools_file, monkeypatch):
    requests = chat_through_input(
        tiny_runtime(qwen_tokenizer, max_new_tokens=80), tools_file, "set_flag", monkeypatch, Typist("")
    )
    assert requests[-1].messages[-1]["content"] == NO_RESULT


def test_a_model_that_calls_for_ever_is_asked_once_then_answers_in_words(
    qwen_tokenizer, tools_file, monkeypatch, capsys
):
    """A model that calls at every answer (here: each held to a call, the same call): the user gives the
    first call's result; the same call made again is not run (nor asked), and the next answer is shown no
    tools, so the model answers in words and the user has the word (the limit: tests/core/test_tool_turns.py)."""
    runtime, typist = tiny_runtime(qwen_tokenizer), Typist()
    original = fit_tools

    def always_calling(args, session):
        tools = original(args, session)
        tools.after = tools.first  # every answer held to a call, not only the first
        return tools

    monkeypatch.setattr(chat, "fit_tools", always_calling)
    requests = chat_through_input(runtime, tools_file, "set_flag", monkeypatch, typist)
    assert typist.asked.count("set_flag result> ") == 1 and MAX_CALLS_PER_MESSAGE == 10
    assert len(requests) == 3 and requests[-1].tools is None, "after the repeat: an answer with no tools"
    assert typist.asked[-1].strip() == "you>", "the user has the word"
    told = [m for m in requests[-1].messages if m["role"] == "tool"][-1]
    assert "made already" in told["content"], "the model is told why its call was not run again"


def test_read_tools_takes_a_list_or_an_object_with_tools(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps([WEATHER]))
    (tmp_path / "object.json").write_text(json.dumps({"tools": [WEATHER]}))
    a, b = read_tools(str(tmp_path / "list.json"), None), read_tools(str(tmp_path / "object.json"), "get_weather")
    assert a is not None and b is not None
    assert a.tools == b.tools and (a.choice, b.choice, b.named) == ("auto", "function", "get_weather")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--tools", "t.json", "--mcp", "m.json"], "give --tools FILE or --mcp CONFIG, not both"),
        (["--approve-tools"], "--approve-tools runs the tools of MCP servers: give them with --mcp CONFIG"),
        (["--mcp", "missing.json"], "--mcp missing.json: no such file"),
        (["--suffix", "x", "--mcp", "m.json"], "no --tools or --mcp"),
    ],
)
def test_tool_options_that_cannot_go_together_are_said_before_the_model_loads(options, words, monkeypatch, capsys):
    monkeypatch.setattr(chat, "runtime_from_args", lambda args: pytest.fail("the model was loaded"))
    assert main(["generate", QUESTION, *options, "--model", "tiny"]) == 2
    assert words in capsys.readouterr().err
