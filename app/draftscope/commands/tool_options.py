"""Tools in the terminal: ``--tools FILE`` and ``--tool-choice`` for ``draftscope generate`` and
``draftscope chat``, on the server's own pieces (core/tools.py reads the tools and fits them to the
model, core/tool_formats.py knows each family's call format, core/tool_calls.py reads an answer
into calls): the terminal only reads the file, shows the calls and, in a chat, asks the user for each
call's result, which goes back to the model as a ``role: tool`` message."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from draftscope.core.tool_calls import Call, CallReader
from draftscope.core.tools import CHOICES, ToolError, ToolPlan, ToolRequest, message_tool_fields, plan, tool_request

TOOLS_HELP = (
    "tools the model may call: a JSON file with a list of tools in OpenAI's shape "
    '([{"type": "function", "function": {"name", "description", "parameters"}}], or {"tools": [...]}); '
    "generate prints each call as a JSON line, chat asks you for each call's result"
)
TOOL_CHOICE_HELP = (
    "none (the tools are not shown), auto (the model decides), required (it must call one) or a tool's "
    "name (it must call that one); a required call is held to the tools' schemas. In a chat it holds for "
    "the first answer to each message (default: auto)"
)
MAX_CALLS_PER_MESSAGE = 8  # a model that calls tools for ever is stopped after this many for one message
NO_RESULT = "(no result)"
STOPPED = "(not run: the user stopped the tool calls)"
OVER_LIMIT = f"(not run: the limit of {MAX_CALLS_PER_MESSAGE} tool calls for one message was reached)"


def add_tool_arguments(parser) -> None:
    parser.add_argument("--tools", default=None, metavar="FILE", help=TOOLS_HELP)
    parser.add_argument("--tool-choice", default=None, metavar="none|auto|required|NAME", help=TOOL_CHOICE_HELP)


def read_tools(path: str | None, choice: str | None) -> ToolRequest | None:
    """``--tools`` and ``--tool-choice`` read and checked before the model loads: ValueError naming the
    file (or the choice) and the problem; None when no tools are offered."""
    if path is None:
        if choice is not None:
            raise ValueError(f"--tool-choice {choice}: there are no tools to choose from (give --tools FILE)")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            listed = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--tools {path}: {exc}") from exc
    if isinstance(listed, dict) and "tools" in listed:
        listed = listed["tools"]
    if not isinstance(listed, list) or not listed:
        raise ValueError(f'--tools {path}: the file holds a list of tools (or {{"tools": [...]}}), none found')
    named = None if choice is None or choice in CHOICES else {"type": "function", "function": {"name": choice}}
    try:
        return tool_request({"tools": listed, "tool_choice": named or choice})
    except ToolError as exc:
        where = f"--tool-choice {choice}" if exc.param == "tool_choice" else f"--tools {path}: {exc.param}"
        raise ValueError(f"{where}: {exc}") from exc


class TerminalTools:
    """The tools fitted to the loaded model: the plan for the first answer to a message (a required
    call held to the grammar) and for the answers after tool results (the model free: else it would
    call tools for ever), and the reading of the answer being written."""

    def __init__(self, request: ToolRequest, tokenizer: Any, schema: str | None) -> None:
        """ValueError, in the server's words, when the model's template shows it no tools, or when a
        required call and ``--json-schema`` would both hold the answer."""
        try:
            first = plan(request, tokenizer)
            after = plan(replace(request, choice="auto", named=None), tokenizer)
        except ToolError as exc:
            raise ValueError(str(exc)) from exc
        if first is None or after is None:  # "none": read_tools' caller shows no tools
            raise ValueError("tool choice 'none' shows the model no tools")
        if first.grammar is not None and schema is not None:
            raise ValueError("--json-schema and a required tool call cannot both hold the answer")
        self.first, self.after = first, after
        self.reader: CallReader | None = None

    def prepare(self, request) -> None:
        """A GenerationRequest shows the tools, and is held to the required call's grammar when it
        answers the user (not a tool's result)."""
        follow_up = bool(request.messages) and request.messages[-1].get("role") == "tool"
        fitted: ToolPlan = self.after if follow_up else self.first
        request.tools = fitted.request.tools
        if fitted.grammar is not None:
            request.grammar = fitted.grammar
        self.reader = fitted.reader()

    def said(self, text: str) -> str:
        """Of the answer's new ``text``, what is content (calls are shown once they are read)."""
        return _content(self.reader.push(text)) if self.reader is not None else text

    def finish(self) -> str:
        """The content the answer's end lets out (held back while it might have opened a call)."""
        return _content(self.reader.finish()) if self.reader is not None else ""

    def calls(self) -> list[Call]:
        """The last answer's whole calls; a call its length limit cut is said on stderr, not run."""
        calls = self.reader.calls if self.reader is not None else []
        for cut in (c for c in calls if _arguments(c) is None):
            print(f"draftscope: the answer was cut inside its call to {cut.name}: not run", file=sys.stderr)
        return [c for c in calls if _arguments(c) is not None]

    def converse(self, session, answer_again: Callable[[], bool]) -> None:
        """After an answer to the user, while it calls tools: each call shown, its result asked (one
        line; empty: "(no result)"), sent back as a tool message with the call's id, and the model
        answers on; at most MAX_CALLS_PER_MESSAGE calls for one message."""
        made = 0
        while calls := self.calls():
            _keep_calls(session, self.reader, calls)
            if made + len(calls) > MAX_CALLS_PER_MESSAGE:
                print(
                    f"[{MAX_CALLS_PER_MESSAGE} tool calls for one message: the limit; these are not run]",
                    file=sys.stderr,
                )
                _results(session, calls, lambda _: OVER_LIMIT)
                return
            made += len(calls)
            for call in calls:
                print(f"[call] {call.name} {call.arguments}", flush=True)
            try:
                _results(session, calls, lambda call: input(f"{call.name} result> ").strip() or NO_RESULT)
            except (EOFError, KeyboardInterrupt):
                print()
                return
            if not answer_again():
                return


def fit_tools(args, tokenizer) -> TerminalTools | None:
    """``args.tool_request`` (read_tools') fitted to the loaded model as ``args.tool_plan``."""
    request = getattr(args, "tool_request", None)
    fitted = None
    if request is not None and request.choice != "none":
        fitted = TerminalTools(request, tokenizer, getattr(args, "grammar", None))
    args.tool_plan = fitted
    return fitted


def calls_json(args) -> str:
    """``generate``'s calls, a JSON object (name, arguments) a line, after its content ("" : none)."""
    tools: TerminalTools | None = getattr(args, "tool_plan", None)
    if tools is None or not (calls := tools.calls()):
        return ""
    lines = [json.dumps({"name": c.name, "arguments": _arguments(c)}, ensure_ascii=False) for c in calls]
    return ("\n" if tools.reader is not None and tools.reader.content else "") + "\n".join(lines)


def _content(deltas: list[dict]) -> str:
    return "".join(d.get("content", "") for d in deltas)


def _arguments(call: Call) -> dict | None:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _keep_calls(session, reader: CallReader | None, calls: list[Call]) -> None:
    """The answer's turn as the template reads an answer that called: its content and its tool_calls."""
    session.drop_last()  # kept as the text it wrote; again as content and calls
    fields = message_tool_fields({"tool_calls": [c.as_dict() for c in calls]}, 0, "assistant")
    session.say(reader.content if reader is not None else "", role="assistant", tool_fields=fields)


def _results(session, calls: list[Call], result: Callable[[Call], str]) -> None:
    """A tool message per call; a call left without its result (the user stopped) gets STOPPED."""
    answered = 0
    try:
        for call in calls:
            text = result(call)
            session.say(text, role="tool", tool_fields={"tool_call_id": call.id, "name": call.name})
            answered += 1
    finally:
        for call in calls[answered:]:
            session.say(STOPPED, role="tool", tool_fields={"tool_call_id": call.id, "name": call.name})
