"""One line per served request, as llama-server and Ollama print them: when, who, what, the HTTP
status, the answer's tokens and the seconds it took. The terminal prints them (``draftscope
serve``); the app keeps the latest for Settings ▸ Server.

An ASGI middleware: the line is made when the response's last byte is sent (a streamed answer's
included), from the status it started with and the token count the answer handler leaves in the
request's state (``completion_tokens``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

TOKENS_KEY = "completion_tokens"  # request.state.completion_tokens, set by the answer handler


def log_line(
    *, at: float, client: str, method: str, path: str, status: int | None, tokens: int | None, seconds: float
) -> str:
    """``2026-11-26 09:40:01 127.0.0.1:51234 POST /v1/chat/completions 200 · 40 tokens · 1.23 s``."""
    when = datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")
    parts = [f"{when} {client} {method} {path} {status if status is not None else 'no response (client left)'}"]
    if tokens is not None:
        parts.append(f"{tokens} tokens")
    parts.append(f"{seconds:.2f} s")
    return " · ".join(parts)


class RequestLog:
    def __init__(self, app, on_line: Callable[[str], None]) -> None:
        self.app, self.on_line = app, on_line

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started_at, started = time.time(), time.perf_counter()
        status: list[int] = []
        logged = False

        def finish() -> None:
            nonlocal logged
            if logged:
                return
            logged = True
            host, port = scope.get("client") or ("?", 0)
            tokens = getattr(scope.get("state", {}), "get", lambda *_: None)(TOKENS_KEY)
            try:
                self.on_line(
                    log_line(
                        at=started_at,
                        client=f"{host}:{port}",
                        method=scope["method"],
                        path=scope["path"],
                        status=status[0] if status else None,
                        tokens=tokens,
                        seconds=time.perf_counter() - started,
                    )
                )
            except Exception:  # a log that fails never fails the request
                pass

        async def logging_send(message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finish()

        try:
            await self.app(scope, receive, logging_send)
        except Exception:
            if not status:  # Starlette's error handler, outside this middleware, answers it with a 500
                status.append(500)
            raise
        finally:
            finish()  # a client that left mid-answer is logged too
