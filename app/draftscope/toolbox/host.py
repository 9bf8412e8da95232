"""The tool host: the user's MCP servers, started and called from any thread, failures contained.

`ToolHost` runs one asyncio loop on a daemon thread it owns; every server's connection lives there
(toolbox/mcp_link.py), the callers block on a future. A server that does not start, dies, hangs or
writes what is not MCP gives words naming it (`start()`'s errors, a `ToolOutcome`), never an exception;
a crashed server is started again at its next call; `close()` (or the interpreter's exit) ends every
server's process. `probe_server` lists one server's tools for Settings.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import weakref
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from draftscope.toolbox.mcp_link import ServerLink
from draftscope.toolbox.servers import McpServer
from draftscope.toolbox.tool_results import ToolInfo, ToolOutcome, exception_words

__all__ = ["ToolHost", "ToolInfo", "ToolOutcome", "probe_server"]

T = TypeVar("T")
SLACK_S = 30.0  # past a call's own bounds (start + call + shutdown), a caller stops waiting
CLOSE_S = 15.0  # for every server's process to end (the SDK's shutdown is bounded at ~6.5 s)
STOP_WAIT_S = 2.0  # for calls under way to end when the host closes


class _LoopThread:
    """An asyncio loop on a daemon thread: the one place the servers' connections live."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="draftscope-mcp", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


def _shutdown(runner: _LoopThread, links: list[ServerLink], closing: threading.Event, calls: set) -> None:
    """Close: calls under way are stopped, every server's process ended, the loop stopped. Also run
    at the interpreter's exit (weakref.finalize), so it holds no reference to the host."""
    closing.set()
    if not runner.thread.is_alive():
        return
    concurrent.futures.wait(list(calls), timeout=STOP_WAIT_S)
    for future in list(calls):
        future.cancel()

    async def close_all() -> None:
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)
        # what is left (a liveness check) ends here, not as "Task was destroyed" on the app's stderr
        left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    try:
        runner.submit(close_all()).result(CLOSE_S)
    except Exception:  # a server that outlived its kill is the SDK's to log; the loop stops regardless
        pass
    runner.stop()


class ToolHost:
    """The user's MCP servers, connected on the host's own thread; every method may be called from
    any thread (but not from the host's loop) and none raises for a server's failure."""

    def __init__(
        self, servers: Sequence[McpServer], *, start_timeout_s: float = 30, call_timeout_s: float = 60
    ) -> None:
        names = [s.name for s in servers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two servers are named {twice[0]!r}: each needs its own name")
        logging.getLogger("mcp").addHandler(logging.NullHandler())  # the SDK's logs never over a chat
        self.servers = {s.name: s for s in servers}
        self.start_timeout_s = start_timeout_s
        self.call_timeout_s = call_timeout_s
        self._closing = threading.Event()
        self._invalid = {s.name: s.problems()[0] for s in servers if s.problems()}
        self._links = {
            s.name: ServerLink(s, start_timeout_s, self._closing)
            for s in servers
            if s.enabled and s.name not in self._invalid
        }
        self._calls: set[concurrent.futures.Future] = set()
        self._runner = _LoopThread()
        self._finalizer = weakref.finalize(
            self, _shutdown, self._runner, list(self._links.values()), self._closing, self._calls
        )

    def start(self) -> dict[str, str]:
        """Connect every enabled server at once; {name: words} for those that failed (the others are
        usable). A server whose settings are wrong is named too, without being run."""
        if self._closing.is_set():
            return {name: f"server {name!r}: the tool host is closed" for name in self._links}

        async def open_all() -> list[str]:
            return list(await asyncio.gather(*(link.open() for link in self._links.values())))

        future = self._runner.submit(open_all())
        try:
            words = future.result(self.start_timeout_s + SLACK_S)
        except Exception as exc:  # the loop itself failed: every server is named
            future.cancel()
            words = [f"server {name!r} could not start: {exception_words(exc)}" for name in self._links]
        failed = {name: w for name, w in zip(self._links, words) if w}
        return {**self._invalid, **failed}

    def tools(self) -> list[ToolInfo]:
        """The started (or crashed and to be restarted) enabled servers' enabled tools."""
        if self._closing.is_set():
            return []
        out = []
        for link in self._links.values():
            off = set(link.server.disabled_tools)
            out += [t for t in list(link.tools) if t.name not in off]
        return out

    def errors(self) -> dict[str, str]:
        """The servers that failed and why: at start, or after a crash until they start again."""
        found = {name: link.problem for name, link in self._links.items() if link.problem}
        return {**self._invalid, **found}

    def call(
        self,
        server: str,
        tool: str,
        arguments: dict,
        *,
        timeout_s: float | None = None,
        cancel: threading.Event | None = None,
    ) -> ToolOutcome:
        """Run ``tool`` of ``server`` and wait for its outcome (blocking; thread-safe); a server that
        crashed is started again first. Never raises for the server's failure."""
        began = time.monotonic()
        refused = self._refusal(server, tool, arguments)
        if refused:
            return ToolOutcome("failed", refused, 0.0)
        timeout = self.call_timeout_s if timeout_s is None else timeout_s
        future: concurrent.futures.Future[ToolOutcome] = concurrent.futures.Future()
        try:
            future = self._runner.submit(self._links[server].call(tool, dict(arguments), timeout, cancel))
            self._calls.add(future)
            outcome = future.result(self.start_timeout_s + timeout + SLACK_S)
        except concurrent.futures.CancelledError:
            outcome = ToolOutcome(
                "stopped", f"the call to {tool!r} of server {server!r} ended: the tool host closed", 0
            )
        except Exception as exc:  # the host's own failure (or a wait past every bound), named
            future.cancel()
            outcome = ToolOutcome(
                "failed", f"the call to {tool!r} of server {server!r} failed: {exception_words(exc)}", 0
            )
        finally:
            self._calls.discard(future)
        return replace(outcome, seconds=time.monotonic() - began)

    def _refusal(self, server: str, tool: str, arguments: object) -> str:
        """Why a call cannot be made at all ("" when it can)."""
        if self._closing.is_set():
            return f"the call to {tool!r} of server {server!r} was not made: the tool host is closed"
        if server in self._invalid:
            return self._invalid[server]
        if server not in self._links:
            there = "is switched off" if server in self.servers else "is not one of the MCP servers"
            return f"server {server!r} {there}"
        if tool in self._links[server].server.disabled_tools:
            return f"tool {tool!r} of server {server!r} is switched off"
        if not isinstance(arguments, dict):
            return f"the call to {tool!r} of server {server!r} was not made: its arguments are not a JSON object"
        if threading.current_thread() is self._runner.thread:
            return f"the call to {tool!r} of server {server!r} was made from the tool host's own thread"
        return ""

    def close(self) -> None:
        """End every server's process and the host's thread; calls under way end "stopped".
        Idempotent; also done at the interpreter's exit."""
        self._finalizer()

    def __enter__(self) -> ToolHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def probe_server(server: McpServer, timeout_s: float = 30) -> list[ToolInfo]:
    """Settings' "list its tools": connect, list every tool (those switched off too), disconnect.
    ValueError with words naming the server when it cannot."""
    problems = server.problems()
    if problems:
        raise ValueError(problems[0])
    host = ToolHost([replace(server, enabled=True, disabled_tools=())], start_timeout_s=timeout_s)
    try:
        errors = host.start()
        if errors:
            raise ValueError(errors[server.name])
        return host.tools()
    finally:
        host.close()
