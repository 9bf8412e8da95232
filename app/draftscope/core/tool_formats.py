"""How a model writes tool calls, read from its chat template: one small table (:data:`FORMATS`), the
grammar that holds an answer to that format where a call is required, and whether a template renders
tools at all. Parsing an answer into calls: ``core/tool_calls.py``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from draftscope.engine.grammar import JSON_STYLE, GrammarError


@dataclass(frozen=True)
class CallFormat:
    """One family's call syntax. A block of calls opens with one of ``openers`` (anywhere after text,
    or only at the answer's start), holds ``first`` then calls (JSON objects) separated by ``between``
    and closes with ``last`` ("" : the answer's end). Special tokens among the openers ([TOOL_CALLS],
    <|python_tag|>) are left out of the answer's text by the detokenizer, so "" opens a block too."""

    name: str
    markers: tuple[str, ...]  # text in the chat template that says the format is this one
    openers: tuple[str, ...]
    anywhere: bool  # a block may follow text (else it must open the answer)
    first: str
    between: str  # "" : one call per block
    last: str
    arguments: str  # the key of a call's arguments
    joiner: str  # what the grammar writes between blocks, or between calls in a block


FORMATS = (
    # Qwen2.5, Hermes, and the many templates written after them
    CallFormat("hermes", ("<tool_call>",), ("<tool_call>",), True, "\n", "", "\n</tool_call>", "arguments", "\n"),
    CallFormat("mistral", ("[TOOL_CALLS]",), ("[TOOL_CALLS]", ""), False, "[", ",", "]", "arguments", ", "),
    CallFormat(
        "llama3",
        ("<|python_tag|>", "<|start_header_id|>"),
        ("<|python_tag|>", ""),
        False,
        "",
        ";",
        "",
        "parameters",
        "; ",
    ),
)
FORMAT_WORDS = "Qwen/Hermes <tool_call>, Mistral [TOOL_CALLS] or Llama 3 JSON"


def template_text(tokenizer: Any) -> str:
    """The chat template a request with tools is rendered with (a tokenizer may keep several by name)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return template if isinstance(template, str) else ""


def format_of(tokenizer: Any) -> CallFormat | None:
    """The call format the model's template teaches it, or None when it is none of :data:`FORMATS`."""
    text = template_text(tokenizer)
    return next((f for f in FORMATS if any(m in text for m in f.markers)), None)


PROBE_TOOL = {"type": "function", "function": {"name": "probe_tool_x7", "parameters": {"type": "object"}}}


def renders_tools(tokenizer: Any) -> bool:
    """Whether the template shows the model its tools: it reads ``tools`` and a conversation rendered with
    a tool differs from the one without (SmolLM2's template never looks at them)."""
    text = template_text(tokenizer)
    if "tools" not in text:
        return False
    probe = [{"role": "user", "content": "hi"}]
    try:
        plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        shown = tokenizer.apply_chat_template(probe, tools=[PROBE_TOOL], tokenize=False, add_generation_prompt=True)
    except Exception:  # a template that fails on tools does not take them
        return False
    return plain != shown and "probe_tool_x7" in shown


def call_grammar(fmt: CallFormat, tools: list[dict], *, parallel: bool, tokenizer: Any = None) -> str:
    """A Lark grammar (llguidance's) of one or more calls in ``fmt``, each ``{"name": one of the tools,
    "<arguments>": that tool's parameters}``, the name first, as json.dumps spaces it. The format's markers are
    written as the model writes them: a marker that is one of ``tokenizer``'s added tokens (Qwen's
    ``<tool_call>``) is that token, not its text (llguidance takes a token only as what it is)."""
    from llguidance import LLMatcher

    shapes: list[dict] = []
    defs: dict = {}
    for i, tool in enumerate(tools):
        parameters, own = _lifted(tool["function"]["parameters"], f"t{i}_")
        shapes.append(_call_schema(fmt, tool["function"]["name"], parameters))
        defs.update(own)
    schema = {"x-guidance": JSON_STYLE, "anyOf": shapes, **({"$defs": defs} if defs else {})}
    body = f"%json {json.dumps(schema)}"
    if fmt.anywhere:  # a block per call
        call = f"{_terms(fmt.openers[0] + fmt.first, tokenizer)} body {_terms(fmt.last, tokenizer)}"
        calls = f"call ({_terms(fmt.joiner, tokenizer)} call)*" if parallel else "call"
        lark = f"start: {calls}\ncall: {call}\nbody: {body}\n"
    else:  # one block of calls
        calls = f"body ({_terms(fmt.joiner, tokenizer)} body)*" if parallel else "body"
        lark = f"start: {_terms(fmt.first, tokenizer)} {calls} {_terms(fmt.last, tokenizer)}\nbody: {body}\n"
    try:
        grammar = LLMatcher.grammar_from_lark(lark)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise GrammarError(f"the tools' parameters cannot be used as a grammar: {exc}") from exc
    problem = LLMatcher.validate_grammar(grammar)
    if problem:
        raise GrammarError(f"the tools' parameters cannot be used as a grammar: {problem}")
    return grammar


def _call_schema(fmt: CallFormat, name: str, parameters: dict) -> dict:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, fmt.arguments: parameters},
        "required": ["name", fmt.arguments],
        "additionalProperties": False,
    }


_DEFS = ("$defs", "definitions")


def _lifted(parameters: dict, prefix: str) -> tuple[dict, dict]:
    """A tool's parameters without their definitions, which go to the grammar's root (renamed with
    ``prefix``, its references with them): nested under a call, ``#/$defs/X`` would point at nothing
    (Pydantic writes every nested model so, as the Agents SDK and LangChain send it)."""
    own = {
        name: body for key in _DEFS if isinstance(parameters.get(key), dict) for name, body in parameters[key].items()
    }
    if not own:
        return parameters, {}
    rest = {k: v for k, v in parameters.items() if k not in _DEFS}
    renamed = {prefix + name: _renamed_refs(body, prefix) for name, body in own.items()}
    return _renamed_refs(rest, prefix), renamed


def _renamed_refs(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        return {k: _ref(v, prefix) if k == "$ref" else _renamed_refs(v, prefix) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed_refs(v, prefix) for v in value]
    return value


def _ref(ref: Any, prefix: str) -> Any:
    for key in _DEFS:
        if isinstance(ref, str) and ref.startswith(f"#/{key}/"):
            return f"#/$defs/{prefix}{ref[len(key) + 3 :]}"
    return ref


def _terms(text: str, tokenizer: Any) -> str:
    """``text`` as Lark terms: each of the tokenizer's added tokens in it as ``<[id]>``, the rest as strings."""
    added: dict[str, int] = getattr(tokenizer, "get_added_vocab", dict)() if tokenizer is not None else {}
    pattern = "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True) if t and t in text)
    parts = re.split(f"({pattern})", text) if pattern else [text]
    terms = [f"<[{added[p]}]>" if p in added else f'"{_lark(p)}"' for p in parts if p]
    return " ".join(terms) or '""'


def _lark(text: str) -> str:
    """``text`` inside a Lark string literal."""
    return json.dumps(text)[1:-1]
