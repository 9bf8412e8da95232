"""Whether an answer of ``bench structured`` is what its request asked for: JSON its schema accepts, or
tool calls to tools it offered with arguments their parameters' schema accepts. The judge is the
``jsonschema`` package where it is installed (a validator of the standard, apart from both servers'
grammars), else llguidance's matcher over a vocabulary of single bytes (whitespace free, so another
server's spacing is not held against it); ``JUDGE`` names which."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from typing import NamedTuple

JUDGE = "jsonschema" if importlib.util.find_spec("jsonschema") is not None else "llguidance"


class Verdict(NamedTuple):
    valid: bool
    why: str  # "" when valid


def check_json(text: str, schema: dict) -> Verdict:
    """``text`` against ``schema``: JSON at all, then the schema's."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Verdict(False, f"not JSON: {exc}")
    problem = _jsonschema_problem(value, schema) if JUDGE == "jsonschema" else _llguidance_problem(text, schema)
    return Verdict(problem is None, problem or "")


def check_tool_calls(calls: Sequence[dict], tools: Sequence[dict]) -> Verdict:
    """``calls`` ({"name", "arguments"}: the arguments as the JSON text sent) against the offered ``tools``
    (OpenAI's shape): at least one, each to an offered tool, its arguments valid."""
    if not calls:
        return Verdict(False, "no tool call")
    offered = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    for call in calls:
        name = call.get("name")
        if name not in offered:
            return Verdict(False, f"a call to {name!r}, not one of {', '.join(offered)}")
        verdict = check_json(call.get("arguments") or "", offered[name])
        if not verdict.valid:
            return Verdict(False, f"{name}'s arguments: {verdict.why}")
    return Verdict(True, "")


def _jsonschema_problem(value: object, schema: dict) -> str | None:
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or 'the answer'}: {error.message}"


_BYTES: list = []  # llguidance's vocabulary of the 256 bytes and an end token, built once


def _llguidance_problem(text: str, schema: dict) -> str | None:
    from llguidance import LLMatcher, LLTokenizer

    if not _BYTES:
        encoder = {bytes([b]): b for b in range(256)}
        _BYTES.append(
            LLTokenizer.from_tiktoken(encoder=encoder, special_tokens={"<end>": 256}, pattern=r"[\s\S]", eos_token=256)
        )
    vocabulary = _BYTES[0]
    grammar = LLMatcher.grammar_from_json_schema(schema, {"whitespace_flexible": True})
    matcher = LLMatcher(vocabulary, grammar, log_level=0)
    if matcher.is_error():
        return f"the schema cannot be judged: {matcher.get_error()}"
    raw = text.encode()
    for offset, token in enumerate(vocabulary.tokenize_bytes(raw)):
        if not matcher.consume_token(token):
            seen = raw[max(0, offset - 20) : offset + 1].decode(errors="replace")
            return f"the schema refuses it at byte {offset}: {seen!r}"
    return None if matcher.is_accepting() else "the schema wants more: the answer stops short"
