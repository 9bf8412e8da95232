"""A request's body before it is answered, each step bounded before it starts (``asgi`` runs them
in this order): the request takes its place within the queue limit (``Answerer.admit``: 429 and
nothing read when the queue is full), its body is read within the size limit (413), then it is
parsed on a worker of a small pool (:data:`PARSING_AT_ONCE` at most): the JSON, its nesting
depth, the fields, the attached files and the prompt's tokens. So a 48 MB body or a slow PDF
never stalls the event loop (``/v1/models`` and every stream go on answering), and many large
requests at once cost at most the queue limit's bodies and a few parses."""

from __future__ import annotations

import asyncio
import json

from starlette.requests import Request

import draftscope.server.protocol as p

# Levels of arrays and objects a request body may have: OpenAI's deepest field,
# messages[i].content[j].file.file_data, sits in the 6th. Deeper values are refused at once, so nothing that reads the body later (the
# fields' checks, an error quoting a value) can recurse into Python's recursion limit.
MAX_DEPTH = 64
# Bodies parsed (and their files read, their prompts tokenized) at once: each holds its body, the
# decoded JSON and its files in memory, and a PDF may take seconds. More wait their turn, within
# the queue limit.
PARSING_AT_ONCE = 4
# Seconds a body may take to arrive once its headers have: a request holds its place in the queue
# while its body comes, so a client that stalls mid-body must not hold it for good. A local client
# sends the 32 MB a body may have in well under a second; a minute leaves room for a slow link.
BODY_SECONDS = 60.0


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 before any of it is read when its Content-Length is over
    ``limit``, or as soon as a body sent without one (chunked) passes it: a multi-GB POST from any
    local process cannot grow the server. A body that has not all come within
    :data:`BODY_SECONDS` is refused with 408, and its place in the queue given back."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise p.ApiError(400, f"the Content-Length header is not a number: {declared[:40]!r}")
        if int(declared) > limit:
            raise _too_large(f"{int(declared):,} bytes", limit)
    try:
        return await asyncio.wait_for(_collect(request, limit), BODY_SECONDS)
    except asyncio.TimeoutError:
        raise p.ApiError(
            408,
            f"the request body did not arrive within {BODY_SECONDS:g} s of its headers",
            code="request_timeout",
        ) from None


async def _collect(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large("over that", limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: str, limit: int) -> p.ApiError:
    return p.ApiError(
        413,
        f"the request body is {size}; this server takes at most {limit:,} bytes (draftscope serve --max-body-mb)",
        code="request_too_large",
    )


def _too_deep(where: str | None) -> p.ApiError:
    return p.ApiError(
        400,
        f"the request body is nested too deep{f' in {where!r}' if where else ''}: "
        f"this server takes at most {MAX_DEPTH} levels of arrays and objects",
        param=where,
        code="nested_too_deep",
    )


def parse_json(raw: bytes):
    """The body's JSON value, or a 400 saying what is wrong with it: not JSON, not UTF-8, an
    integer of more digits than Python reads, or arrays and objects nested deeper than
    :data:`MAX_DEPTH` (Python's parser itself stops near 1,000 levels with RecursionError)."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(None) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, and int's digit limit
        raise p.ApiError(400, f"the request body is not valid JSON: {exc}") from exc
    check_depth(value)
    return value


def check_depth(value) -> None:
    """Raise a 400 naming the top-level field whose value nests deeper than MAX_DEPTH; walked
    without recursion, so any depth that parsed is measured."""
    stack: list[tuple[dict | list, int, str | None]] = [(value, 1, None)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth, field = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(field)
        for key, child in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(child, (dict, list)):
                # the field named is the body's own key the value sits under
                named = field if depth > 1 else key if isinstance(key, str) else None
                stack.append((child, depth + 1, named))
