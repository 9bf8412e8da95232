"""What the tool host hands back: a server's tool (`ToolInfo`), a call's outcome (`ToolOutcome`), an
MCP result as the text a model reads (`result_text`) and an exception as words (`exception_words`).

`mcp_types` is only read from the objects passed in (no import here): the SDK loads when a host starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

STATUSES = ("ok", "error", "timeout", "failed", "stopped")


@dataclass(frozen=True)
class ToolInfo:
    """One tool a server offers, as it listed it."""

    server: str
    name: str
    description: str
    input_schema: dict


@dataclass(frozen=True)
class ToolOutcome:
    """One call's end. status: "ok"; "error" (the tool said isError, or the server refused the call);
    "timeout" (no answer within the call's time); "failed" (the server is down, died, or answered
    something that is not MCP; a server or tool that is not there); "stopped" (the caller's cancel).
    text: the result as text, or the words of what went wrong, naming the server."""

    status: str
    text: str
    seconds: float


def result_text(result: Any) -> str:
    """A `CallToolResult` as text: text blocks as they are, an embedded text resource as its text,
    images, audio, blobs and links described in a line; structured content as JSON when it is all."""
    parts = [_block_text(block) for block in result.content or []]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_size(len(block.data) * 3 // 4)}]"
    if kind == "resource_link":
        return f"[resource link: {block.name} <{block.uri}>]"
    if kind == "resource":
        contents = block.resource
        text = getattr(contents, "text", None)
        if text is not None:
            return text
        blob = getattr(contents, "blob", "") or ""
        return f"[resource: {contents.uri}, {contents.mime_type or 'binary'}, {_size(len(blob) * 3 // 4)}]"
    return f"[{kind or 'unknown'} content]"


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1024:,.0f} KB"


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside nested exception groups (anyio's task groups wrap what failed)."""
    inner = getattr(exc, "exceptions", None)  # a BaseExceptionGroup (3.11) or its backport (3.10)
    if isinstance(inner, (list, tuple)):
        return [leaf for e in inner for leaf in leaf_exceptions(e)]
    return [exc]


def exception_words(exc: BaseException) -> str:
    """The most telling exception inside ``exc`` as words (its type when it says nothing)."""
    leaves = leaf_exceptions(exc)
    telling = [e for e in leaves if isinstance(e, Exception)] or leaves
    first = telling[0]
    words = str(first).strip() or type(first).__name__
    return words if len(words) <= 300 else words[:300] + "..."
