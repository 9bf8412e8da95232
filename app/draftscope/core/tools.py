"""Tool calls in a chat request: ``tools`` (or the legacy ``functions``), ``tool_choice`` (or
``function_call``), ``parallel_tool_calls``, and the conversation's calls and results (an assistant's
``tool_calls``, ``role: tool`` and the legacy ``role: function``), each checked with a 400 naming what
is wrong. :func:`plan` then fits them to the model: its template must show it tools (else a 400 that
says so), its call format is read from that template, and a call that is required gets its grammar.
The answer's text back into calls: ``core/tool_calls.py``."""

from __future__ import annotations

import json
import re
import reprlib
from dataclasses import dataclass
from typing import Any

from draftscope.core.tool_calls import CallReader
from draftscope.core.tool_formats import FORMAT_WORDS, CallFormat, call_grammar, format_of, renders_tools
from draftscope.engine.grammar import GrammarError

CHOICES = ("none", "auto", "required")
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # OpenAI's rule for a function's name (dots as vLLM allows)
NO_PARAMETERS = {"type": "object", "properties": {}}


class ToolError(ValueError):
    """A tool field that cannot be used: ``param`` names it, the words say why (a 400)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def bad(param: str, message: str) -> ToolError:
    return ToolError(param, message)


def quoted(value: Any) -> str:
    return reprlib.repr(value)


@dataclass(frozen=True)
class ToolRequest:
    """The tools a request offers and what it asks of them."""

    tools: list[dict]  # OpenAI's shape, {"type": "function", "function": {name, description, parameters}}
    choice: str  # "none", "auto", "required", or "function" (the one ``named``)
    named: str | None = None
    parallel: bool = True

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t["function"]["name"] for t in self.tools)


@dataclass(frozen=True)
class ToolPlan:
    """Tools fitted to the model: how its template shows them, how it writes calls, the grammar that
    holds a required call (None: the model is free)."""

    request: ToolRequest
    fmt: CallFormat
    grammar: str | None

    def reader(self) -> CallReader:
        """A fresh reading of one answer into calls."""
        offered = [t for t in self.request.tools if self.request.named in (None, t["function"]["name"])]
        return CallReader(self.fmt, frozenset(t["function"]["name"] for t in offered), eager=self.grammar is not None)


def tool_request(body: dict) -> ToolRequest | None:
    """The request's tools and tool choice, or None when it offers none (or says "none" with none)."""
    tools = _tools(body)
    choice, named = _choice(body)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", "'parallel_tool_calls' must be true or false")
    if not tools:
        if choice in ("none", "auto"):
            return None
        raise bad("tool_choice", f"tool_choice {quoted(named or choice)} needs 'tools' to choose from")
    if named is not None and named not in {t["function"]["name"] for t in tools}:
        raise bad("tool_choice", f"tool_choice names {quoted(named)}, which is not one of the request's tools")
    return ToolRequest(tools, choice, named, parallel)


def _tools(body: dict) -> list[dict]:
    tools, functions = body.get("tools"), body.get("functions")
    if tools is not None and functions is not None:
        raise bad("functions", "send 'tools' or the older 'functions', not both")
    if functions is not None:  # the legacy shape: the functions themselves
        if not isinstance(functions, list):
            raise bad("functions", "'functions' must be a list of functions")
        tools = [{"type": "function", "function": f} for f in functions]
        where = "functions[{}]"
    else:
        where = "tools[{}].function"
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad("tools", "'tools' must be a list of tools")
    out, seen = [], set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise bad(f"tools[{i}]", "each tool must be an object of type 'function' (the one kind served)")
        function = _function(tool.get("function"), where.format(i))
        if function["name"] in seen:
            raise bad(where.format(i) + ".name", f"two tools are named {quoted(function['name'])}")
        seen.add(function["name"])
        out.append({"type": "function", "function": function})
    return out


def _function(function: Any, where: str) -> dict:
    if not isinstance(function, dict):
        raise bad(where, "a tool needs its 'function': an object with 'name' and 'parameters'")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise bad(f"{where}.name", f"a function's name is 1 to 64 letters, digits, '_', '-' or '.', got {quoted(name)}")
    parameters = function.get("parameters")
    if parameters is None:
        parameters = NO_PARAMETERS
    if not isinstance(parameters, dict):
        raise bad(f"{where}.parameters", "a function's 'parameters' must be a JSON schema (an object)")
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise bad(f"{where}.description", "a function's 'description' must be a string")
    out = {"name": name, "parameters": parameters}
    return out if description is None else {"name": name, "description": description, "parameters": parameters}


def _choice(body: dict) -> tuple[str, str | None]:
    """tool_choice (or function_call) as ("none" | "auto" | "required" | "function", the name)."""
    param = "tool_choice" if body.get("tool_choice") is not None else "function_call"
    choice = body.get(param)
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        if choice not in CHOICES or (param == "function_call" and choice == "required"):
            raise bad(param, f"'{param}' must be one of {', '.join(CHOICES)} or a named function, got {quoted(choice)}")
        return choice, None
    function = choice.get("function") if isinstance(choice, dict) and param == "tool_choice" else choice
    if param == "tool_choice" and isinstance(choice, dict) and choice.get("type") != "function":
        raise bad(param, 'an object tool_choice is {"type": "function", "function": {"name": ...}}')
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise bad(param, f"'{param}' names a function by its 'name', got {quoted(choice)}")
    return "function", name


def plan(request: ToolRequest | None, tokenizer: Any) -> ToolPlan | None:
    """``request`` fitted to the model (None: the answer is plain text): a 400 when its template shows it
    no tools or writes calls in a format not read here; a required call's grammar, compiled."""
    if request is None or request.choice == "none":
        return None
    if not renders_tools(tokenizer):
        raise bad("tools", "this model's chat template has no tools: it cannot be shown them, nor call them")
    fmt = format_of(tokenizer)
    if fmt is None:
        raise bad("tools", f"this model's chat template writes tool calls in a format not read here ({FORMAT_WORDS})")
    if request.choice not in ("required", "function"):
        return ToolPlan(request, fmt, None)
    offered = [t for t in request.tools if request.named in (None, t["function"]["name"])]
    try:
        grammar = call_grammar(fmt, offered, parallel=_parallel(request, fmt), tokenizer=tokenizer)
    except GrammarError as exc:
        raise bad("tools", str(exc)) from exc
    return ToolPlan(request, fmt, grammar)


def _parallel(request: ToolRequest, fmt: CallFormat) -> bool:
    """Several calls in one answer: asked for, not one named function, and a format whose templates read
    them back (Llama 3.1's refuses more than one call a turn)."""
    return request.parallel and request.named is None and fmt.name != "llama3"


def message_tool_fields(message: dict, i: int, role: str) -> dict:
    """A message's part in tool calling as a chat template reads it: an assistant's ``tool_calls``
    (their arguments as objects), a tool result's ``tool_call_id`` and ``name``."""
    if role == "assistant":
        calls = message.get("tool_calls")
        legacy = message.get("function_call")
        if calls is None and legacy is not None:
            calls = [{"id": f"call_{i}", "type": "function", "function": legacy}]
            return {"tool_calls": [_call(calls[0], f"messages[{i}].function_call", legacy=True)]}
        if calls is None:
            return {}
        if not isinstance(calls, list):
            raise bad(f"messages[{i}].tool_calls", "'tool_calls' must be a list of calls")
        return {"tool_calls": [_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]}
    if role in ("tool", "function"):
        out = {}
        call_id, name = message.get("tool_call_id"), message.get("name")
        if role == "tool" and not isinstance(call_id, str):
            raise bad(f"messages[{i}].tool_call_id", "a tool message needs the 'tool_call_id' of the call it answers")
        if role == "function" and not isinstance(name, str):
            raise bad(f"messages[{i}].name", "a function message needs the 'name' of the function it answers")
        if isinstance(call_id, str):
            out["tool_call_id"] = call_id
        if isinstance(name, str):
            out["name"] = name
        return out
    return {}


def _call(call: Any, where: str, *, legacy: bool = False) -> dict:
    """One call the assistant made, its arguments read from their JSON text (templates write an object).
    Arguments that are not a JSON object (a call cut by the length limit) go to the template as the text
    they are, as OpenAI takes them: an agent sends back what the server said."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise bad(where, 'a tool call is {"id", "type": "function", "function": {"name", "arguments"}}')
    arguments = function.get("arguments", "{}")
    args_where = where + ("" if legacy else ".function") + ".arguments"
    if isinstance(arguments, str):
        arguments = _object_or_text(arguments)
    elif not isinstance(arguments, dict):
        raise bad(args_where, "a call's arguments must be JSON text or a JSON object")
    call_id = call.get("id") if isinstance(call.get("id"), str) else "call_0"
    return {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": arguments}}


def _object_or_text(arguments: str) -> dict | str:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def template_message(message: dict) -> dict:
    """A parsed message as the chat template reads it."""
    out = {"role": message["role"], "content": message.get("model", message["content"])}
    for key in ("tool_calls", "tool_call_id", "name"):
        if key in message:
            out[key] = message[key]
    return out
