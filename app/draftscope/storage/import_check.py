"""The one place a conversation file's values are checked, by type and range, before anything is
written (storage/transfer.py reads the formats and calls these for every value it keeps).

Text must be text SQLite can store (no unpaired surrogates); times and counts must be numbers in
range; an answer's figures must be numbers the app can show, and one that is not is left out, as
if missing (a hand-written file's "tau": "fast" draws no τ, never an error); anything else kept
(drafter settings, figures this version does not know) must be plain JSON at most
:data:`MAX_DEPTH` deep. A message's tool fields (its calls, a result's call id, tool, server,
status and size) are checked by type and size, each call's arguments an object or text. A missing or null optional value takes its default; any other value that
fails raises :class:`ImportError_` naming where it is and what is wrong, so a damaged file
imports nothing and says why.
"""

from __future__ import annotations

import json
import reprlib

MAX_TIME = 253_402_300_799  # seconds since 1970 to the end of the year 9999: no calendar shows later
MAX_COUNT = 10**12  # tokens of one attachment: far past any file a model reads
MAX_FIGURE = 1e15  # an answer's figure (tokens, τ, tokens/s, ms): far past any real one
MAX_SEED = 2**64 - 1
MAX_DEPTH = 16  # nesting of the JSON kept as it is (drafter settings, unknown figures)
ANSWER_FIGURES = (  # an answer's figures as session.answer_record takes them from its MessageStats
    "tokens",
    "steps",
    "tau",
    "tokens_per_second",
    "time_to_first_token_ms",
    "elapsed_s",
    "speedup_estimate",
    "prompt_tokens",
    "prompt_kept",
    "prompt_read_ahead",
    "prompt_restored",
    "restore_seconds",
)
FIGURES = (  # what the history stores and the views show (the speedup panel scales its axis by them)
    *ANSWER_FIGURES,
    "baseline_tokens_per_second",
    "decode_tokens_per_second",
    "plain_tokens_per_second",
)

_short = reprlib.Repr()
_short.maxlevel, _short.maxstring, _short.maxother, _short.maxlist, _short.maxdict = 2, 40, 40, 4, 4


class ImportError_(ValueError):
    """Why a file cannot be imported, in words for the user (nothing was imported)."""


def shown(value) -> str:
    """A value as an error message quotes it: short, whatever its size or depth."""
    return _short.repr(value)


def _number_in(value, low: float, high: float) -> bool:
    # compared as they are: an int too large for a float, NaN and infinity all fall outside
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def text(value, where: str) -> str:
    """``value`` when it is text that can be stored; else ImportError_."""
    if not isinstance(value, str):
        raise ImportError_(f"{where} must be text, got {shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ImportError_(f"{where} holds a broken character (an unpaired surrogate at {exc.start})") from exc
    return value


def moment(value, where: str, default: float) -> float:
    """A time in seconds since 1970 (``default`` when missing)."""
    if value is None:
        return default
    if not _number_in(value, 0, MAX_TIME):
        raise ImportError_(f"{where} must be a time in seconds since 1970 (up to the year 9999), got {shown(value)}")
    return float(value)


def count(value, where: str) -> int:
    """A count of tokens, 0 to :data:`MAX_COUNT` (0 when missing)."""
    if value is None:
        return 0
    if not _number_in(value, 0, MAX_COUNT):
        raise ImportError_(f"{where} must be a count between 0 and {MAX_COUNT:,}, got {shown(value)}")
    return int(value)


def plain(value, where: str) -> dict | None:
    """A JSON object kept as it is (None when missing): at most :data:`MAX_DEPTH` deep."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ImportError_(f"{where} must be an object, got {shown(value)}")
    _shallow(value, where)
    return value


def _shallow(value, where: str) -> None:
    """ImportError_ for JSON nested deeper than MAX_DEPTH (walked without recursion: any depth)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ImportError_(f"{where} is nested more than {MAX_DEPTH} levels deep")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def figures(value, where: str) -> dict | None:
    """An answer's figures (None when missing): each known one a number in range, a seed a whole
    number, the finish reason and why drafting was off text, busy true or false; one that is not is
    left out. The rest kept as plain JSON."""
    stats = plain(value, where)
    if stats is None:
        return None
    kept = {}
    for key, v in stats.items():
        if key in FIGURES:
            usable = v is None or _number_in(v, 0, MAX_FIGURE)
        elif key == "seed":
            usable = v is None or (isinstance(v, int) and _number_in(v, 0, MAX_SEED))
        elif key in ("finish_reason", "drafting"):  # drafting: why drafting was off, in words
            usable = v is None or isinstance(v, str)
        elif key == "busy":
            usable = v is None or isinstance(v, bool)
        else:
            usable = True
        if usable:
            kept[key] = v
    return kept


def sent_file(value, where: str) -> dict:
    """An attachment as the model read it: its name and text, and optionally its kind, size in
    tokens and the passages it was cut to."""
    if not isinstance(value, dict):
        raise ImportError_(f"{where} must be an object with a name and its text, got {shown(value)}")
    passages = value.get("passages")
    if passages is not None and not isinstance(passages, list):
        raise ImportError_(f"{where}: 'passages' must be a list of text, got {shown(passages)}")
    kind = value.get("kind")
    return {
        "name": text(value.get("name"), f"{where}: 'name'"),
        "text": text(value.get("text"), f"{where}: 'text'"),
        "kind": "text" if kind is None else text(kind, f"{where}: 'kind'"),
        "tokens": count(value.get("tokens"), f"{where}: 'tokens'"),
        "passages": [text(p, f"{where}: passage {k + 1}") for k, p in enumerate(passages or ())],
    }


MAX_TOOL_CALLS = 1000  # calls in one answer: far past any limit on calls per answer
MAX_TOOL_NAME = 256  # characters of a call's id, a tool's or a server's name
MAX_ARGUMENTS = 10**6  # characters of one call's arguments (as JSON)
MAX_STATUS = 40  # characters of a result's status ("ok", "error", "timeout", "denied", ...)
MAX_CALL_SECONDS = 10**6  # how long one call ran: far past any timeout


def tool_fields(value, where: str, role: str) -> dict:
    """A message's part in tool calling ({} when missing): an answer's ``tool_calls``; a tool
    result's ``tool_call_id`` (needed), ``name``, ``server``, ``status``, ``chars`` and ``seconds`` (how
    long the call ran, shown on its card). Each by type
    and size; a field this version does not know is left out (the chat template would read it)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ImportError_(f"{where} must be an object, got {shown(value)}")
    out: dict = {}
    if value.get("tool_calls") is not None:
        if role != "assistant":
            raise ImportError_(f"{where}: 'tool_calls' belong to an assistant's message, not a {role}'s")
        calls = value["tool_calls"]
        if not isinstance(calls, list) or len(calls) > MAX_TOOL_CALLS:
            raise ImportError_(f"{where}: 'tool_calls' must be a list of at most {MAX_TOOL_CALLS} calls")
        out["tool_calls"] = [_tool_call(c, f"{where}: call {k + 1}") for k, c in enumerate(calls)]
    for key in ("tool_call_id", "name", "server", "status"):
        if value.get(key) is not None:
            out[key] = _short_text(value[key], f"{where}: '{key}'", MAX_STATUS if key == "status" else MAX_TOOL_NAME)
    if value.get("chars") is not None:
        out["chars"] = count(value["chars"], f"{where}: 'chars'")
    if value.get("seconds") is not None:
        if not _number_in(value["seconds"], 0, MAX_CALL_SECONDS):
            raise ImportError_(f"{where}: 'seconds' must be a time in seconds, got {shown(value['seconds'])}")
        out["seconds"] = float(value["seconds"])
    if role == "tool" and "tool_call_id" not in out:
        raise ImportError_(f"{where}: a tool's result needs the 'tool_call_id' of the call it answers")
    return out


def _tool_call(value, where: str) -> dict:
    """One call: {"id", "type": "function", "function": {"name", "arguments"}}, its arguments an
    object (as the chat template reads them) or the text the model wrote (a call cut short)."""
    function = value.get("function") if isinstance(value, dict) else None
    if not isinstance(function, dict):
        raise ImportError_(f'{where} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}')
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        text(arguments, f"{where}: 'arguments'")
        size = len(arguments)
    else:
        plain(arguments if arguments is not None else {}, f"{where}: 'arguments'")
        size = len(json.dumps(arguments, ensure_ascii=False))
    if size > MAX_ARGUMENTS:
        raise ImportError_(f"{where}: 'arguments' are {size:,} characters, past the {MAX_ARGUMENTS:,} a call may have")
    return {
        "id": _short_text(value.get("id"), f"{where}: 'id'", MAX_TOOL_NAME),
        "type": "function",
        "function": {
            "name": _short_text(function.get("name"), f"{where}: 'name'", MAX_TOOL_NAME),
            "arguments": arguments if arguments is not None else {},
        },
    }


def _short_text(value, where: str, most: int) -> str:
    """Text of at most ``most`` characters."""
    value = text(value, where)
    if len(value) > most:
        raise ImportError_(f"{where} is {len(value):,} characters long, past the {most} it may have")
    return value
