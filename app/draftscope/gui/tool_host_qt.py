"""The window's MCP servers (toolbox/host.py's ``ToolHost``) for the app's lifetime: started in the
background once the app is up and again whenever Settings ▸ Tools change (the old servers closed
first), closed when the app quits, so no server's process outlives it.

A start connects every enabled server on a thread of its own (a server may take seconds, or never
answer: the window stays usable meanwhile); ``ready`` then says the tools are known, and
``problems`` names each server that could not start, in words. Calls are made from the thread that
runs the tool loop (``call``: blocking, never raises for a server's failure)."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from PySide6.QtCore import QObject, Signal, Slot

from draftscope.storage.settings import tool_servers
from draftscope.toolbox.host import ToolHost
from draftscope.toolbox.tool_catalog import openai_tools
from draftscope.toolbox.tool_results import ToolOutcome

log = logging.getLogger(__name__)

JOIN_S = 10.0  # closing waits this long for a start under way (its servers are closed as it ends)
NO_HOST = "the tool servers are not running (they were closed, or are starting again)"


def _catalog(host) -> tuple[list[dict], dict[str, tuple[str, str]]]:
    return openai_tools(host.tools())


def _new_host(servers, call_timeout_s: float) -> ToolHost:
    return ToolHost(servers, call_timeout_s=call_timeout_s)  # the mcp SDK loads when it starts a server


def _close_quietly(host) -> None:
    try:
        host.close()
    except Exception:  # closing is best effort; ToolHost also ends its servers at interpreter exit
        log.exception("closing the tool servers failed")


def _unallowed(servers) -> list:
    """The servers as what a start depends on: which tools are always allowed is not part of it."""
    return [replace(s, always_allowed=()) for s in servers]


class ToolHostQt(QObject):
    """The MCP servers the settings name, started and closed with the app (see the module's docstring)."""

    ready = Signal()  # a start (or a change to no servers) is over: ``tools``, ``route`` and ``problems`` are its
    _started = Signal(int, object, object)  # (start number, the host, {server: words}): to the UI thread

    def __init__(self, parent: QObject | None = None, *, new_host=_new_host) -> None:
        """``new_host(servers, call_timeout_s)``: a ToolHost (tests give their own)."""
        super().__init__(parent)
        self._new_host = new_host
        self.host = None  # the running ToolHost (None: no servers, starting, or closed)
        self.tools: list[dict] = []  # the servers' tools in OpenAI's shape
        self.route: dict[str, tuple[str, str]] = {}  # a tool's name as the model sees it -> (server, tool)
        self.problems: dict[str, str] = {}  # servers that could not start -> why
        self.starting = False
        self.closed = False
        self._number = 0  # the current start: a start that a newer one replaced is closed as it ends
        self._pending: dict[int, object] = {}  # hosts still starting, by their start's number
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._started.connect(self._on_started)  # queued: emitted on the starting thread
        self._applied: list | None = None  # the servers last started (their always-allowed tools aside)
        self.call_timeout_s: float | None = None  # Settings ▸ Tools' call timeout, as last applied

    def apply(self, settings) -> None:
        """Run the servers ``settings`` enable (the ones running now are closed first, in the background).
        Started again only when the servers changed (or some could not start): the limits and the
        always-allowed tools are read at each call, so a change to them leaves the servers be."""
        if self.closed:
            return
        self.call_timeout_s = float(settings.tool_timeout_s)
        servers = [s for s in tool_servers(settings) if s.enabled]
        if self._applied is not None and _unallowed(servers) == self._applied and not self.problems:
            return
        self._applied = _unallowed(servers)
        self._let_go()
        self._number += 1
        if not servers:
            self.ready.emit()
            return
        self.starting = True
        thread = threading.Thread(
            target=self._start,
            args=(self._number, servers, float(settings.tool_timeout_s)),
            name="ToolHostStart",
            daemon=True,
        )
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _let_go(self) -> None:
        """Forget the running servers and close them off the UI thread (ending a process takes a moment)."""
        host, self.host = self.host, None
        self.tools, self.route, self.problems, self.starting = [], {}, {}, False
        if host is not None:
            thread = threading.Thread(target=_close_quietly, args=(host,), name="ToolHostClose", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _start(self, number: int, servers, call_timeout_s: float) -> None:
        """On the starting thread: connect every server; a start no longer wanted is closed here."""
        try:
            host = self._new_host(servers, call_timeout_s)
        except Exception as exc:  # the SDK missing, a server that cannot be described: said in words
            self._tell(number, None, {s.name: f"server '{s.name}' could not start: {exc}" for s in servers})
            return
        with self._lock:
            self._pending[number] = host
        try:
            errors = host.start()
        except Exception as exc:  # ToolHost.start never raises for a server's failure: this is the host's own
            errors = {s.name: f"server '{s.name}' could not start: {exc}" for s in servers}
        with self._lock:
            self._pending.pop(number, None)
            wanted = number == self._number and not self.closed
        if not wanted:
            _close_quietly(host)
            return
        self._tell(number, host, errors)

    def _tell(self, number: int, host, errors: dict) -> None:
        try:
            self._started.emit(number, host, dict(errors))
        except RuntimeError:  # the window is gone: nothing to tell, nothing left running
            if host is not None:
                _close_quietly(host)

    @Slot(int, object, object)
    def _on_started(self, number: int, host, errors: dict) -> None:
        if number != self._number or self.closed:
            if host is not None:
                _close_quietly(host)
            return
        self.host, self.problems, self.starting = host, errors, False
        try:
            self.tools, self.route = _catalog(host) if host is not None else ([], {})
        except Exception as exc:  # a tool the catalogue cannot name: the servers run, their tools are not offered
            log.exception("the servers' tools could not be listed")
            self.tools, self.route = [], {}
            self.problems = {**errors, "": f"the servers' tools could not be offered: {exc}"}
        self.ready.emit()

    def problem_words(self) -> str:
        """The servers that could not start, in a line for the status bar ("" : none)."""
        return " · ".join(self.problems.values())

    def call(
        self, server: str, tool: str, arguments: dict, cancel: threading.Event, *, timeout_s: float | None = None
    ) -> ToolOutcome:
        """Run one call (blocking: the tool loop's thread) within ``timeout_s`` (None: the settings' as
        last applied); a failure is an outcome in words naming the server."""
        host = self.host
        if host is None:
            return ToolOutcome("failed", f"server '{server}': {NO_HOST}", 0.0)
        timeout = timeout_s if timeout_s is not None else self.call_timeout_s
        return host.call(server, tool, arguments, cancel=cancel, timeout_s=timeout)

    def close(self) -> None:
        """The app quits: every server's process ends (those still starting too); idempotent."""
        with self._lock:
            self.closed = True
            pending = list(self._pending.values())
        self._number += 1
        self._let_go()
        for host in pending:  # a start under way: its processes end now, its thread returns soon
            _close_quietly(host)
        for thread in self._threads:
            thread.join(JOIN_S)
        self._threads = []
