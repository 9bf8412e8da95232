"""One MCP server's connection, on the tool host's event loop (toolbox/host.py runs the loop).

A `Connection` is one life of a server: the SDK's `Client` entered and held by one task (anyio wants a
task group left by the task that entered it), the server's stderr kept in a `StderrTail`, the lines
that were not MCP kept too. A `ServerLink` holds a server's current connection and starts a new one when
the last died: at the first call after a crash. Every failure comes back as words naming the server.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio

from draftscope.toolbox.servers import McpServer
from draftscope.toolbox.tool_results import ToolInfo, ToolOutcome, exception_words, leaf_exceptions, result_text

TAIL_LINES = 20  # of a server's stderr, kept to name in its errors
SAID_LINES = 4  # of those, quoted in an error
LINE_CHARS = 300
PING_S = 3.0  # a server whose stderr closed, or whose call timed out, must answer a ping this fast
CANCEL_POLL_S = 0.05  # how often a running call looks at its cancel event (a threading.Event)
MAX_PAGES = 100  # of a tool listing: a server paging forever cannot hang a start
REAP_S = 10.0  # past the SDK's own bounded shutdown (~6.5 s), a connection's task is cancelled


class StderrTail(asyncio.Protocol):
    """The last lines a server wrote to stderr: kept to name in its errors, never printed."""

    def __init__(self, on_close: Callable[[], None]) -> None:
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.closed = asyncio.Event()
        self._partial = ""
        self._on_close = on_close

    def data_received(self, data: bytes) -> None:
        *lines, partial = (self._partial + data.decode("utf-8", "replace")).split("\n")
        self._partial = partial[-LINE_CHARS:]
        self.lines.extend(line.rstrip()[:LINE_CHARS] for line in lines if line.strip())

    def eof_received(self) -> None:
        if self._partial.strip():
            self.lines.append(self._partial)
        self._partial = ""
        self._closed()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed()

    def _closed(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self._on_close()

    def said(self) -> str:
        """The last lines, as a clause for an error ("" when it wrote nothing)."""
        last = list(self.lines)[-SAID_LINES:]
        return "; its last words on stderr: " + " / ".join(last) if last else ""


class Connection:
    """One life of a server's connection: started, used for calls, ended (or found dead)."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.tail = StderrTail(lambda: self._check_soon("stopped"))
        self.not_mcp: deque[str] = deque(maxlen=3)  # lines on stdout that were not MCP
        self.tools: list[ToolInfo] = []
        self.client: Any = None
        self.down = ""  # why it is no longer usable ("" while it is)
        self._ready: asyncio.Future[str] | None = None
        self._stop = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None
        self._scope: Any = None
        self._tail_transport: asyncio.BaseTransport | None = None
        self._errlog: Any = None  # our copy of the stderr pipe's writing end
        self._checks: set[asyncio.Task[None]] = set()
        self._ending = False  # told to end while starting

    @property
    def name(self) -> str:
        return self.server.name

    async def start(self, timeout_s: float) -> str:
        """Connect and list the tools; "" or the words of why it could not."""
        self._ready = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(timeout_s), name=f"mcp server {self.name}")
        return await asyncio.shield(self._ready)  # a caller cancelled while it starts leaves it to end

    async def _hold(self, timeout_s: float) -> None:
        """The task that enters the client, holds it until told to stop, and leaves it."""
        assert self._ready is not None
        words = ""
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout_s) as scope:
                self._scope = scope
                async with AsyncExitStack() as stack:
                    self.client = await self._enter_client(stack)
                    if self._errlog is not None:
                        self._errlog.close()
                    self.tools = await self._list_tools()
                    scope.deadline = math.inf  # started: from now on only a stop ends it
                    self._ready.set_result("")
                    await self._stop.wait()
            if scope.cancelled_caught and not self._ready.done() and not self._ending:
                words = f"server {self.name!r} gave no MCP answer within {timeout_s:g} s{self._not_mcp_said()}"
        except Exception as exc:  # a server's failure, whatever it is, becomes words
            words = self._start_words(exc) if not self._ready.done() else self._down_words(exc)
        finally:
            await self._after(words)

    async def _after(self, words: str) -> None:
        """What a connection's end leaves: its stderr read out, its start answered, why it is down."""
        if words and self.server.kind == "stdio":
            await _wait(self.tail.closed, 1.0)  # the last lines of a server that died
            words += self.tail.said()
        if self._tail_transport is not None:
            self._tail_transport.close()
        self.client = None
        self.down = self.down or words or f"server {self.name!r} was stopped"
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(words or f"server {self.name!r} stopped while starting")

    async def _enter_client(self, stack: AsyncExitStack) -> Any:
        """The SDK's client, connected over stdio (the command) or streamable HTTP (the URL)."""
        from mcp import Client

        return await stack.enter_async_context(Client(await self._transport(stack), message_handler=self._heard))

    async def _transport(self, stack: AsyncExitStack) -> Any:
        server = self.server
        if server.kind == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(create_mcp_http_client(headers=dict(server.headers) or None))
            return streamable_http_client(server.url, http_client=http)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        self._tail_transport, _ = await loop.connect_read_pipe(lambda: self.tail, os.fdopen(read_fd, "rb", 0))
        errlog = os.fdopen(write_fd, "w")
        self._errlog = errlog  # closed once the child has its copy: its end is then the child's end
        stack.callback(errlog.close)  # (and if the start fails before that)
        params = StdioServerParameters(command=server.command, args=list(server.args), env=dict(server.env) or None)
        return stdio_client(params, errlog=errlog)

    async def _list_tools(self) -> list[ToolInfo]:
        infos: list[ToolInfo] = []
        cursor = None
        for _ in range(MAX_PAGES):
            page = await self.client.list_tools(cursor=cursor)
            infos += [ToolInfo(self.name, t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return infos

    async def _heard(self, message: Any) -> None:
        """The SDK's message handler: a line on stdout that was not MCP is kept to name in errors."""
        if isinstance(message, Exception):
            errors = getattr(message, "errors", None)
            found = errors()[0].get("input") if callable(errors) and errors() else None
            self.not_mcp.append(str(found if found is not None else message)[:LINE_CHARS])

    def _not_mcp_said(self) -> str:
        return "; it wrote what is not MCP: " + " / ".join(repr(s) for s in self.not_mcp) if self.not_mcp else ""

    def _start_words(self, exc: BaseException) -> str:
        """Why a start failed, in words naming the server (and the command or URL)."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        leaves = leaf_exceptions(exc)
        name, command = self.name, self.server.command
        if any(isinstance(e, FileNotFoundError) for e in leaves) and self.server.kind == "stdio":
            return f"server {name!r} could not start: the command {command!r} was not found"
        if any(isinstance(e, PermissionError) for e in leaves) and self.server.kind == "stdio":
            return f"server {name!r} could not start: the command {command!r} cannot be run (permission denied)"
        if any(isinstance(e, MCPError) and e.code == CONNECTION_CLOSED for e in leaves):
            ended = "exited at start" if self.server.kind == "stdio" else "closed the connection at start"
            return f"server {name!r} {ended}{self._not_mcp_said()}"
        failed = f"could not be reached at {self.server.url}" if self.server.kind == "http" else "could not start"
        return f"server {name!r} {failed}: {exception_words(exc)}{self._not_mcp_said()}"

    def _down_words(self, exc: BaseException) -> str:
        return f"server {self.name!r} stopped: {exception_words(exc)}"

    async def call(
        self, tool: str, arguments: dict, timeout_s: float, cancel: Any, closing: threading.Event
    ) -> ToolOutcome:
        """One call to a started connection (seconds are the host's to fill)."""
        stopped: list[bool] = []
        with anyio.CancelScope(deadline=anyio.current_time() + timeout_s) as scope:
            watcher = asyncio.create_task(_watch(scope, cancel, closing, stopped))
            try:
                outcome = await self._call(tool, arguments)
            finally:
                watcher.cancel()
        if not scope.cancelled_caught:
            return outcome
        if stopped:
            why = "the tool host closed" if closing.is_set() else "it was stopped"
            return ToolOutcome("stopped", f"the call to {tool!r} of server {self.name!r} ended: {why}", 0.0)
        self._check_soon("stopped answering after a call timed out")
        said = self._not_mcp_said()
        return ToolOutcome("timeout", f"server {self.name!r} did not answer {tool!r} within {timeout_s:g} s{said}", 0.0)

    async def _call(self, tool: str, arguments: dict) -> ToolOutcome:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        try:
            result = await self.client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                return ToolOutcome(
                    "error", f"server {self.name!r} refused the call to {tool!r}: {exc.error.message}", 0.0
                )
            ended = "stopped" if self.server.kind == "stdio" else "closed the connection"
            return ToolOutcome(
                "failed", await self.end(f"server {self.name!r} {ended} during the call to {tool!r}"), 0.0
            )
        except ValueError as exc:  # pydantic's ValidationError: a result of the wrong shape
            words = f"server {self.name!r} answered {tool!r} with what is not an MCP result: {exception_words(exc)}"
            return ToolOutcome("failed", words, 0.0)
        except Exception as exc:  # the transport's failure (an HTTP server gone): the next call reconnects
            words = f"server {self.name!r} failed during the call to {tool!r}: {exception_words(exc)}"
            return ToolOutcome("failed", await self.end(words), 0.0)
        if result.is_error:
            return ToolOutcome("error", f"tool {tool!r} of server {self.name!r} failed: {result_text(result)}", 0.0)
        return ToolOutcome("ok", result_text(result), 0.0)

    async def end(self, words: str = "") -> str:
        """Mark it down (``words``: why; its last stderr lines are added) and have its task leave the
        client (a start under way is cancelled). Returns the words with what the server last said."""
        if words and self.server.kind == "stdio":
            await _wait(self.tail.closed, 1.0)  # the last lines of a server that died
        said = words + self.tail.said() + self._not_mcp_said() if words else ""
        self.down = self.down or said
        self._stop.set()
        if self._ready is not None and not self._ready.done() and self._scope is not None:
            self._ending = True
            self._scope.cancel()
        return said

    async def finished(self) -> None:
        """Wait for its task to leave the client (the process ended); cancel it past REAP_S."""
        if self._holder is None:
            return
        done, _ = await asyncio.wait({self._holder}, timeout=REAP_S)
        if not done and self._scope is not None:
            self._scope.cancel()
            await asyncio.wait({self._holder}, timeout=REAP_S)

    async def answers(self) -> bool:
        """Whether it still answers a request within PING_S."""
        if self.client is None:
            return False
        try:
            # a listing, not a ping: servers on the 2026-07-28 protocol no longer answer pings
            await asyncio.wait_for(self.client.list_tools(cache_mode="refresh"), PING_S)
            return True
        except Exception:  # no answer, whatever the reason, is what this asks
            return False

    def _check_soon(self, why: str) -> None:
        """Its stderr closed, or a call timed out: a started server that no longer answers a ping is
        ended (restarted at its next call), and ``why`` names what happened."""
        started = self._ready is not None and self._ready.done() and not self._ready.result()
        if not started or self.down or self._stop.is_set():
            return

        async def check() -> None:
            if not await self.answers() and not (self.down or self._stop.is_set()):
                await self.end(f"server {self.name!r} {why}")

        task = asyncio.create_task(check())
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except asyncio.TimeoutError:
        pass


async def _watch(scope: Any, cancel: Any, closing: threading.Event, stopped: list[bool]) -> None:
    """Cancels a call's scope when its cancel event (a threading.Event) or the host's closing is set."""
    while not (closing.is_set() or (cancel is not None and cancel.is_set())):
        await asyncio.sleep(CANCEL_POLL_S)
    stopped.append(True)
    scope.cancel()


async def _stopped_before(task: asyncio.Future, cancel: Any, closing: threading.Event) -> bool:
    """Waits for ``task``; True when its cancel event (a threading.Event) or the host's closing came first."""
    while not task.done():
        if closing.is_set() or (cancel is not None and cancel.is_set()):
            return True
        await asyncio.wait({task}, timeout=CANCEL_POLL_S)
    return False


class ServerLink:
    """A server's current connection: started on demand, started again after it died."""

    def __init__(self, server: McpServer, start_timeout_s: float, closing: threading.Event) -> None:
        self.server = server
        self.start_timeout_s = start_timeout_s
        self.closing = closing
        self.connection: Connection | None = None
        self.tools: list[ToolInfo] = []  # the last listing (kept while a crashed server waits to restart)
        self.error = ""  # why its last start failed
        self._lock = asyncio.Lock()
        self._starting: Connection | None = None
        self._opening: set[asyncio.Future] = set()  # starts a stopped call left running (held, not dropped)

    @property
    def problem(self) -> str:
        """Why it is not usable now: a failed start, or a crash not yet followed by a call."""
        return self.error or (self.connection.down if self.connection is not None else "")

    async def open(self) -> str:
        """Started (or already running): "" or the words of why it could not start."""
        async with self._lock:
            conn = self.connection
            if conn is not None and not conn.down:
                return ""
            if conn is not None:
                await conn.end()
                await conn.finished()
            if self.closing.is_set():
                return f"server {self.server.name!r}: the tool host is closed"
            self._starting = conn = Connection(self.server)
            words = await conn.start(self.start_timeout_s)
            self._starting = None
            if words:
                await conn.finished()
                self.connection, self.tools, self.error = None, [], words
                return words
            self.connection, self.tools, self.error = conn, conn.tools, ""
            return ""

    async def call(self, tool: str, arguments: dict, timeout_s: float, cancel: Any) -> ToolOutcome:
        """A call, starting the server first when it is not running. Stop (``cancel``) or the host's
        closing during that start ends the call at once; the start goes on (for the next call), or
        is ended by the host's close."""
        opening = asyncio.ensure_future(self.open())
        self._opening.add(opening)
        opening.add_done_callback(self._opened)
        if await _stopped_before(opening, cancel, self.closing):
            why = "the tool host closed" if self.closing.is_set() else "it was stopped"
            words = f"the call to {tool!r} of server {self.server.name!r} ended while the server started: {why}"
            return ToolOutcome("stopped", words, 0.0)
        words = opening.result()
        conn = self.connection
        if words or conn is None:
            return ToolOutcome("failed", words or f"server {self.server.name!r} is not running", 0.0)
        return await conn.call(tool, arguments, timeout_s, cancel, self.closing)

    def _opened(self, opening: asyncio.Future) -> None:
        self._opening.discard(opening)
        if not opening.cancelled():
            opening.exception()  # a stopped call's start that failed: retrieved, never "never retrieved"

    async def close(self) -> None:
        """End its connection (and a start under way): its process ends."""
        for conn in (self._starting, self.connection):
            if conn is not None:
                await conn.end()
                await conn.finished()
