"""The calling loop the window and the terminal share (core/tool_turns.py), over a conversation kept in
memory and a ``run`` of the test's own: a call allowed ahead runs and its result is read back, one
asked about waits for the user's word, a denial, "always for this tool", Stop while a call runs, the
limit on calls for one message, a call to no such tool, a call cut inside its arguments, a result cut
to what the model may read, and the tools shown the same for every answer."""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from draftscope.core.tool_turns import BAD_ARGUMENTS, DENIED, STOPPED, ToolTurns, cut_to_tokens

QWEN_TEMPLATE = (Path(__file__).parent.parent / "data" / "qwen2.5_chat_template.jinja").read_text()


def tool(called: str, properties: dict) -> dict:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {"type": "function", "function": {"name": called, "description": f"the {called} tool", "parameters": schema}}


TOOLS = [
    tool("add", {"a": {"type": "integer"}, "b": {"type": "integer"}}),
    tool("read_note", {"name": {"type": "string"}}),
]
ROUTE = {"add": ("calc", "add"), "read_note": ("files", "read_note")}


def called(tool_name: str, /, **arguments) -> str:
    """A call as Qwen's template teaches the model to write it."""
    return f"<tool_call>\n{json.dumps({'name': tool_name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module")
def qwen_tokenizer(tokenizer):
    tools = copy.deepcopy(tokenizer)
    tools.chat_template = QWEN_TEMPLATE
    return tools


class Memory:
    """The part of a ChatSession the loop uses, in memory: what it says, the answer's calls kept."""

    def __init__(self, tokenizer, context: int = 4096) -> None:
        self.engine = SimpleNamespace(tokenizer=tokenizer, max_context=context)
        self.said: list[dict] = []
        self.room = 10**6  # tokens left in the context for the results (ChatSession.room_left)

    def room_left(self, tools=None, then=()) -> int:
        return self.room - sum(self.count_tokens(m["content"]) for m in self.results())

    def say(self, text: str, *, role: str = "user", tool_fields: dict | None = None) -> None:
        self.said.append({"role": role, "content": text, **(tool_fields or {})})

    def keep_calls(self, content: str, calls: list[dict]) -> None:
        last = next(m for m in reversed(self.said) if m["role"] == "assistant")
        last.update(content=content, tool_calls=calls)

    def turns(self) -> list:
        return [SimpleNamespace(id=None) for _ in self.said]

    def count_tokens(self, text: str) -> int:
        return len(self.engine.tokenizer(text, add_special_tokens=False)["input_ids"])

    def results(self) -> list[dict]:
        return [m for m in self.said if m["role"] == "tool"]


@dataclass
class Outcome:
    status: str
    text: str
    seconds: float = 0.01


@dataclass
class Runner:
    """A ``run`` that answers each call from ``answers`` (by tool) and remembers what it ran."""

    answers: dict = field(default_factory=lambda: {"add": "3", "read_note": "a note\nof two lines"})
    ran: list = field(default_factory=list)

    def __call__(self, server: str, tool: str, arguments: dict, cancel: threading.Event) -> Outcome:
        self.ran.append((server, tool, arguments))
        answer = self.answers[tool]
        return answer(arguments, cancel) if callable(answer) else Outcome("ok", answer)


class Heard:
    """Everything the loop's events told."""

    def __init__(self, turns: ToolTurns) -> None:
        self.changed: list[tuple[str, str]] = []
        self.waiting: list[list[str]] = []
        self.always: list[tuple[str, str]] = []
        self.done = 0
        turns.events.changed.connect(lambda c: self.changed.append((c.id, c.state)))
        turns.events.waiting.connect(lambda calls: self.waiting.append([c.name for c in calls]))
        turns.events.always.connect(lambda s, t: self.always.append((s, t)))
        turns.events.done.connect(self._done)

    def _done(self) -> None:
        self.done += 1


def answer(turns: ToolTurns, session: Memory, text: str, *, piece: int = 7):
    """One answer written as ``text`` (streamed in pieces), recorded and read: (shown prose, calls)."""
    request = SimpleNamespace(messages=list(session.said), tools=None, grammar=None)
    turns.prepare(request)
    shown = "".join(turns.said(text[i : i + piece]) for i in range(0, len(text), piece)) + turns.finish()
    session.say(text, role="assistant")
    return shown, turns.after_answer(), request


def looped(qwen_tokenizer, runner=None, **options):
    session = Memory(qwen_tokenizer)
    turns = ToolTurns(session, TOOLS, ROUTE, runner if runner is not None else Runner(), **options)
    session.say("What is 1 + 2?")
    return session, turns, Heard(turns)


def test_an_allowed_call_runs_and_the_model_reads_its_result(qwen_tokenizer):
    runner = Runner()
    session, turns, heard = looped(qwen_tokenizer, runner, allowed=lambda server, tool: server == "calc")
    shown, calls, request = answer(turns, session, "Let me add.\n" + called("add", a=1, b=2))
    assert shown == "Let me add." and "<tool_call>" not in shown, "the call is held back from the prose"
    assert request.tools == TOOLS and request.grammar is None
    assert [(c.label, c.arguments, c.state) for c in calls] == [("calc.add", {"a": 1, "b": 2}, "approved")]
    assert session.said[1]["content"] == "Let me add."
    assert session.said[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert turns.ready() and not heard.waiting
    turns.run_approved()
    assert runner.ran == [("calc", "add", {"a": 1, "b": 2})]
    call_id = calls[0].id
    assert session.results() == [
        {"role": "tool", "content": "3", "tool_call_id": call_id, "name": "add", "server": "calc"}
        | {"status": "ok", "chars": 1, "seconds": 0.01}
    ]
    assert [s for i, s in heard.changed] == ["approved", "running", "done", "done"]  # the last: kept
    assert turns.wants_answer() and not heard.done
    shown, calls, follow_up = answer(turns, session, "It is 3.")
    assert shown == "It is 3." and calls == [] and heard.done == 1 and not turns.wants_answer()
    assert follow_up.tools == TOOLS, "every answer is shown the same tools (read ahead, prompt caching)"


def test_a_call_not_allowed_waits_for_the_user(qwen_tokenizer):
    runner = Runner()
    session, turns, heard = looped(qwen_tokenizer, runner)
    _, calls, _ = answer(turns, session, called("read_note", name="x"))
    assert heard.waiting == [["read_note"]] and calls[0].state == "asking" and not turns.ready()
    turns.run_approved()
    assert runner.ran == [] and session.results() == [], "nothing runs before the user's word"
    turns.approve(calls[0].id)
    assert turns.ready()
    turns.run_approved()
    assert runner.ran == [("files", "read_note", {"name": "x"})]
    assert session.results()[0]["content"] == "a note\nof two lines" and turns.wants_answer()


def test_a_denied_call_is_not_run_and_the_model_reads_the_denial(qwen_tokenizer):
    runner = Runner()
    session, turns, heard = looped(qwen_tokenizer, runner)
    _, calls, _ = answer(turns, session, called("read_note", name="secret"))
    turns.deny(calls[0].id)
    assert runner.ran == [] and calls[0].state == "denied"
    assert [(m["content"], m["status"]) for m in session.results()] == [(DENIED, "denied")], "kept at once"
    assert turns.wants_answer(), "the model answers without it"


def test_always_allows_the_tool_for_the_later_calls(qwen_tokenizer):
    session, turns, heard = looped(qwen_tokenizer)
    _, calls, _ = answer(turns, session, called("add", a=1, b=2))
    turns.approve(calls[0].id, always=True)
    assert heard.always == [("calc", "add")]
    turns.run_approved()
    _, calls, _ = answer(turns, session, called("add", a=3, b=4) + called("read_note", name="y"))
    assert [c.state for c in calls] == ["approved", "asking"], "always for that tool, not for every tool"
    assert heard.waiting[-1] == ["read_note"]


def test_results_are_kept_in_the_order_of_the_calls(qwen_tokenizer):
    """The first call waits for the user, the second is allowed: nothing runs ahead of the first."""
    runner = Runner()
    session, turns, heard = looped(qwen_tokenizer, runner, allowed=lambda server, tool: tool == "add")
    _, calls, _ = answer(turns, session, called("read_note", name="x") + "\n" + called("add", a=1, b=1))
    turns.run_approved()
    assert runner.ran == [] and session.results() == []
    turns.approve(calls[0].id)
    turns.run_approved()
    assert [m["name"] for m in session.results()] == ["read_note", "add"]
    assert [m["tool_call_id"] for m in session.results()] == [c.id for c in calls]


def test_past_the_limit_the_calls_are_not_run_and_the_model_answers_once_more(qwen_tokenizer):
    runner = Runner()
    session, turns, heard = looped(qwen_tokenizer, runner, allowed=lambda s, t: True, limit=2)
    _, calls, _ = answer(turns, session, "".join(called("add", a=i, b=i) for i in range(3)))
    assert [c.state for c in calls] == ["approved", "approved", "over_limit"]
    turns.run_approved()
    assert len(runner.ran) == 2 and "limit of 2 tool calls" in session.results()[-1]["content"]
    assert turns.wants_answer(), "the model answers without the call past the limit"
    shown, calls, request = answer(turns, session, "Those are the sums.")
    assert request.tools is None, "past the limit the model is shown no tools: it can only answer in words"
    assert shown == "Those are the sums." and calls == [] and len(runner.ran) == 2
    assert not turns.wants_answer() and heard.done == 1
    session.say("And 2 + 2?")  # a new message: the count starts again
    _, calls, _ = answer(turns, session, called("add", a=2, b=2))
    assert calls[0].state == "approved"


def test_a_call_made_again_with_the_same_arguments_is_not_run_and_the_model_answers_in_words(qwen_tokenizer):
    """Small Qwen models call the same tool again after its result: not run twice, and the next answer
    is shown no tools, so it answers with the result it has."""
    runner = Runner()
    session, turns, heard = looped(qwen_tokenizer, runner, allowed=lambda s, t: True)
    answer(turns, session, called("add", a=1, b=2))
    turns.run_approved()
    _, calls, request = answer(turns, session, called("add", b=2, a=1))
    assert request.tools == TOOLS and [c.state for c in calls] == ["repeated"]
    turns.run_approved()
    assert runner.ran == [("calc", "add", {"a": 1, "b": 2})], "the same call runs once"
    assert "made already" in session.results()[-1]["content"] and turns.wants_answer()
    shown, calls, request = answer(turns, session, "1 + 2 = 3.")
    assert request.tools is None and shown == "1 + 2 = 3." and calls == [] and heard.done == 1
    session.say("And again?")  # a new message may call it again
    _, calls, _ = answer(turns, session, called("add", a=1, b=2))
    assert calls[0].state == "approved"


def test_stop_while_a_call_runs_ends_the_loop(qwen_tokenizer):
    """The running call is cancelled (its run hears the cancel event), the one after it is not run,
    both are kept as stopped, no answer follows and ``done`` is told once."""
    started = threading.Event()

    def slow(arguments, cancel):
        started.set()
        assert cancel.wait(10), "the run heard no cancel"
        return Outcome("failed", "cancelled")

    runner = Runner({"add": slow, "read_note": "never"})
    session, turns, heard = looped(qwen_tokenizer, runner, allowed=lambda s, t: True)
    _, calls, _ = answer(turns, session, called("add", a=1, b=2) + called("read_note", name="n"))
    worker = threading.Thread(target=turns.run_approved)
    worker.start()
    assert started.wait(10)
    turns.stop()
    worker.join(10)
    assert [c.state for c in calls] == ["stopped", "stopped"] and [t for _, t, _ in runner.ran] == ["add"]
    assert [m["status"] for m in session.results()] == ["stopped", "stopped"]
    assert all(m["content"].startswith(STOPPED) for m in session.results())
    assert not turns.wants_answer() and heard.done == 1


def test_stop_while_asking_keeps_the_calls_as_stopped(qwen_tokenizer):
    session, turns, heard = looped(qwen_tokenizer)
    _, calls, _ = answer(turns, session, called("read_note", name="n"))
    turns.stop()
    assert calls[0].state == "stopped" and session.results()[0]["content"] == STOPPED
    assert heard.done == 1 and not turns.wants_answer()


def test_a_call_to_a_tool_no_server_has_is_unknown(qwen_tokenizer):
    session = Memory(qwen_tokenizer)
    turns = ToolTurns(session, TOOLS, {"add": ("calc", "add")}, Runner(), allowed=lambda s, t: True)
    session.say("hi")
    _, calls, _ = answer(turns, session, called("read_note", name="n"))
    assert calls[0].state == "unknown" and "no tool named 'read_note'" in session.results()[0]["content"]
    assert turns.wants_answer()


def test_a_call_cut_inside_its_arguments_is_not_run(qwen_tokenizer):
    """A required call streams its arguments as they come; the length limit cut it: not JSON, not run."""
    runner = Runner()
    session, turns, heard = looped(qwen_tokenizer, runner, allowed=lambda s, t: True, choice="required")
    _, calls, request = answer(turns, session, '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b')
    assert request.grammar is not None, "a required call holds the first answer to its grammar"
    assert calls[0].arguments is None and calls[0].state == "error" and runner.ran == []
    assert session.results()[0]["content"] == BAD_ARGUMENTS
    _, _, follow_up = answer(turns, session, "Sorry.")
    assert follow_up.grammar is None and follow_up.tools == request.tools, "the answers after results are free"


def test_a_failing_run_is_a_failed_call_with_its_words(qwen_tokenizer):
    def crash(arguments, cancel):
        raise ConnectionError("the pipe broke")

    session, turns, heard = looped(qwen_tokenizer, Runner({"add": crash}), allowed=lambda s, t: True)
    _, calls, _ = answer(turns, session, called("add", a=1, b=2))
    turns.run_approved()
    assert calls[0].state == "failed" and "the pipe broke" in session.results()[0]["content"]
    assert turns.wants_answer(), "the model reads the failure and answers"


def test_a_big_result_is_cut_to_what_the_model_may_read(qwen_tokenizer):
    big = "line of a big result\n" * 50_000  # ~1 MB
    session, turns, heard = looped(
        qwen_tokenizer, Runner({"read_note": big}), allowed=lambda s, t: True, result_tokens=300
    )
    _, calls, _ = answer(turns, session, called("read_note", name="big"))
    turns.run_approved()
    kept = session.results()[0]
    assert calls[0].result == big, "the whole result stays with the call"
    assert session.count_tokens(kept["content"]) <= 300 + 40 and kept["chars"] == len(big)
    assert f"the result is {len(big):,} characters" in kept["content"] and "left out]" in kept["content"]


def test_results_share_the_context_left_and_the_note_says_how_much_was_left_out(qwen_tokenizer):
    """Three big results where the context has room for about 600 tokens of them: each reads its share of
    the room, never more than result_tokens, so the follow-up still fits."""
    big = "a line of a long note\n" * 2000
    session, turns, heard = looped(qwen_tokenizer, Runner({"read_note": big}), allowed=lambda s, t: True)
    session.room = 600
    answer(turns, session, "".join(called("read_note", name=n) for n in "abc"))
    turns.run_approved()
    used = [session.count_tokens(m["content"]) for m in session.results()]
    assert len(used) == 3 and sum(used) <= 600, used
    assert all(u >= 100 for u in used), "the room is shared, not taken by the first"
    kept = session.results()[0]["content"]
    shown = int(kept.split("the first ")[1].split(" are shown")[0].replace(",", ""))
    assert f"{len(big) - shown:,} left out]" in kept


def test_a_call_that_failed_may_be_made_again_and_runs(qwen_tokenizer):
    """Only a call that was answered (done or error) is not run again: a timeout, a crash or a denial
    leaves the model free to retry it."""
    outcomes = iter([Outcome("timeout", "files.read_note timed out"), Outcome("ok", "the note")])
    runner = Runner({"read_note": lambda arguments, cancel: next(outcomes)})
    session, turns, heard = looped(qwen_tokenizer, runner, allowed=lambda s, t: True)
    answer(turns, session, called("read_note", name="n"))
    turns.run_approved()
    _, calls, _ = answer(turns, session, called("read_note", name="n"))
    assert [c.state for c in calls] == ["approved"], "a timed-out call may be retried"
    turns.run_approved()
    assert calls[0].state == "done" and len(runner.ran) == 2
    _, calls, _ = answer(turns, session, called("read_note", name="n"))
    assert [c.state for c in calls] == ["repeated"] and len(runner.ran) == 2


def test_a_denied_call_may_be_asked_again(qwen_tokenizer):
    session, turns, heard = looped(qwen_tokenizer)
    _, calls, _ = answer(turns, session, called("read_note", name="n"))
    turns.deny(calls[0].id)
    assert turns.wants_answer()
    _, calls, _ = answer(turns, session, called("read_note", name="n"))
    assert [c.state for c in calls] == ["asking"]


def test_a_result_keeps_how_long_its_call_ran(qwen_tokenizer):
    session, turns, heard = looped(
        qwen_tokenizer,
        Runner({"add": lambda arguments, cancel: Outcome("ok", "3", seconds=1.5)}),
        allowed=lambda s, t: True,
    )
    answer(turns, session, called("add", a=1, b=2))
    turns.run_approved()
    assert session.results()[0]["seconds"] == 1.5


def test_cut_to_tokens_leaves_a_short_text_whole():
    assert cut_to_tokens("short", 10, len) == "short"
    assert cut_to_tokens("x" * 50, 100, len) == "x" * 50
    cut = cut_to_tokens("x" * 500, 300, len)
    assert cut.startswith("x" * 150) and len(cut) <= 300, "the note is counted within the tokens"
    assert "500 characters" in cut and f"{500 - cut.count('x'):,} left out" in cut


def test_results_given_by_the_face_when_nothing_runs_them(qwen_tokenizer):
    """The terminal's --tools FILE: no servers, the user types each result."""
    session = Memory(qwen_tokenizer)
    turns = ToolTurns(session, TOOLS, None, None, allowed=lambda s, t: True)
    session.say("hi")
    _, calls, _ = answer(turns, session, called("add", a=1, b=2) + called("read_note", name="n"))
    assert [(c.server, c.tool, c.state) for c in calls] == [("", "add", "approved"), ("", "read_note", "approved")]
    turns.run_approved()
    assert session.results() == [] and not turns.wants_answer()
    turns.give(calls[0].id, "three")
    turns.give(calls[1].id, "a note")
    assert [m["content"] for m in session.results()] == ["three", "a note"] and turns.wants_answer()


def test_malformed_tools_or_choice_are_said(qwen_tokenizer, tokenizer):
    session = Memory(qwen_tokenizer)
    with pytest.raises(ValueError, match="'nope', which is not one of"):
        ToolTurns(session, TOOLS, ROUTE, Runner(), choice="nope")
    with pytest.raises(ValueError, match="chat template has no tools"):
        ToolTurns(Memory(tokenizer), TOOLS, ROUTE, Runner())
    quiet = ToolTurns(session, TOOLS, ROUTE, Runner(), choice="none")
    assert quiet.tools == [] and not quiet.holds_first
