"""Settings ▸ Tools without Qt: the MCP servers being edited, what each one's tools were when last
listed, and every change the tab makes to them, heard as events (the tab's widgets observe it).

The servers are kept as :class:`McpServer` values (toolbox/servers.py) and go back to the settings
as their dicts (``values``). A server's tool listing is kept per name while its connection (command,
arguments, environment, URL, headers) stays the same: renaming a server keeps it, changing how it
is reached forgets it (the tab lists it again). Importing the ``mcpServers`` JSON of LM Studio,
Claude Desktop or Cursor replaces a server of the same name, keeping the user's switches for its
tools (those name tools, not a connection).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from psygnal import Signal, SignalGroup

from draftscope.storage.settings import MAX_SERVERS
from draftscope.toolbox import ToolInfo, probe_server
from draftscope.toolbox.servers import McpServer, servers_from_json

LISTING, LISTED, FAILED = "listing", "listed", "failed"
PROBE_TIMEOUT_S = 30.0  # a server that has not listed its tools by then is said to have failed
CANCEL_POLL_S = 0.1


@dataclass(frozen=True)
class Listing:
    """A server's tools as last listed: ``state`` LISTING (under way), LISTED or FAILED (``error``)."""

    state: str
    tools: tuple[ToolInfo, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class ToolRow:
    """One of a server's tools as the tab shows it: listed now, or only remembered as switched off."""

    name: str
    description: str
    enabled: bool
    listed: bool


class ToolServersEvents(SignalGroup):
    servers = Signal()  # servers added, removed, replaced, switched, imported, or a tool's switch changed
    listing = Signal(str)  # a server's listing started, arrived or failed (its name)


def connection(server: McpServer) -> tuple:
    """What reaching the server depends on: a listing holds while this stays the same."""
    return (server.command, server.args, sorted(server.env.items()), server.url, sorted(server.headers.items()))


class ToolServers:
    """The servers of Settings ▸ Tools while the dialog is open."""

    def __init__(self, servers: Sequence[McpServer] = ()) -> None:
        self.events = ToolServersEvents()
        self.servers: list[McpServer] = list(servers)
        self._listings: dict[str, Listing] = {}

    # --- reading ------------------------------------------------------------------------------

    def find(self, name: str) -> McpServer | None:
        return next((s for s in self.servers if s.name == name), None)

    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    def values(self) -> list[dict]:
        """The servers as Settings.mcp_servers holds them."""
        return [s.to_dict() for s in self.servers]

    def listing(self, name: str) -> Listing | None:
        """The server's tools as last listed (None: never listed, or its connection changed since)."""
        return self._listings.get(name)

    def tool_rows(self, name: str) -> list[ToolRow]:
        """The server's tools as listed, each with its switch, then the tools switched off that the
        listing does not name (none listed yet, or gone from the server): they can be switched back on."""
        server, listing = self.find(name), self.listing(name)
        if server is None:
            return []
        listed = listing.tools if listing is not None else ()
        rows = [ToolRow(t.name, t.description, t.name not in server.disabled_tools, True) for t in listed]
        names = {t.name for t in listed}
        return rows + [ToolRow(t, "", False, False) for t in server.disabled_tools if t not in names]

    def always_allowed(self) -> list[tuple[str, str]]:
        """(server, tool) for every tool that runs without asking."""
        return [(s.name, tool) for s in self.servers for tool in s.always_allowed]

    def name_problem(self, name: str, editing: str | None = None) -> str | None:
        """Why ``name`` cannot name a new server (``editing``: the server being edited keeps its own)."""
        if not name.strip():
            return "A server needs a name"
        if name != editing and self.find(name) is not None:
            return f"A server named {name!r} is already in the list"
        return None

    # --- changing -----------------------------------------------------------------------------

    def reset(self, servers: Sequence[McpServer]) -> None:
        """Show ``servers`` (the settings shown again): a listing is kept where its server is still
        reached the same way."""
        before = {s.name: connection(s) for s in self.servers}
        self.servers = list(servers)
        self._listings = {
            s.name: self._listings[s.name]
            for s in self.servers
            if s.name in self._listings and before.get(s.name) == connection(s)
        }
        self.events.servers.emit()

    def add(self, server: McpServer) -> None:
        if problem := self.name_problem(server.name):
            raise ValueError(problem)
        if len(self.servers) >= MAX_SERVERS:
            raise ValueError(f"At most {MAX_SERVERS} servers")
        self.servers.append(server)
        self.events.servers.emit()

    def edit(self, name: str, server: McpServer) -> None:
        """``server`` in the place of the one named ``name`` (renamed, or reached another way)."""
        old = self.find(name)
        if old is None:
            raise ValueError(f"No server named {name!r}")
        if problem := self.name_problem(server.name, editing=name):
            raise ValueError(problem)
        self.servers[self.servers.index(old)] = server
        listing = self._listings.pop(name, None)
        if listing is not None and connection(old) == connection(server):
            self._listings[server.name] = listing
        self.events.servers.emit()

    def remove(self, name: str) -> None:
        self.servers = [s for s in self.servers if s.name != name]
        self._listings.pop(name, None)
        self.events.servers.emit()

    def set_enabled(self, name: str, on: bool) -> None:
        self._change(name, lambda s: replace(s, enabled=on))

    def set_tool_enabled(self, name: str, tool: str, on: bool) -> None:
        def switched(s: McpServer) -> McpServer:
            off = [t for t in s.disabled_tools if t != tool]
            return replace(s, disabled_tools=tuple(off if on else [*off, tool]))

        self._change(name, switched)

    def take_back(self, name: str, tool: str) -> None:
        """``tool`` of server ``name`` asks before it runs again."""
        self._change(name, lambda s: replace(s, always_allowed=tuple(t for t in s.always_allowed if t != tool)))

    def import_json(self, text: str) -> str:
        """Add the servers of an ``mcpServers`` JSON text; returns what was done, in words. A bad
        text raises ValueError in words and changes nothing."""
        imported = servers_from_json(text)
        if not imported:
            raise ValueError("The JSON names no servers under mcpServers")
        by_name = {s.name: s for s in self.servers}
        for server in imported:
            old = by_name.get(server.name)
            if old is not None:  # the user's switches name tools: they hold for the new entry too
                allowed = (*old.always_allowed, *(t for t in server.always_allowed if t not in old.always_allowed))
                server = replace(server, disabled_tools=old.disabled_tools, always_allowed=allowed)
            by_name[server.name] = server
        if len(by_name) > MAX_SERVERS:
            raise ValueError(f"That would make {len(by_name)} servers; at most {MAX_SERVERS}")
        before = {s.name: connection(s) for s in self.servers}
        replaced = [s.name for s in imported if s.name in before]
        self.servers = list(by_name.values())
        self._listings = {n: v for n, v in self._listings.items() if before[n] == connection(by_name[n])}
        self.events.servers.emit()
        return _imported_words([s.name for s in imported], replaced)

    def _change(self, name: str, change) -> None:
        server = self.find(name)
        if server is None:
            return
        self.servers[self.servers.index(server)] = change(server)
        self.events.servers.emit()

    # --- listing their tools -------------------------------------------------------------------

    def listing_started(self, server: McpServer) -> None:
        self._keep(server, Listing(LISTING))

    def listed(self, server: McpServer, tools: Sequence[ToolInfo]) -> None:
        self._keep(server, Listing(LISTED, tuple(tools)))

    def listing_failed(self, server: McpServer, error: str) -> None:
        self._keep(server, Listing(FAILED, error=error))

    def _keep(self, server: McpServer, listing: Listing) -> None:
        """A listing of ``server`` as it was asked: dropped when it was removed or is now reached
        another way (its answer is about a server no longer in the list)."""
        now = self.find(server.name)
        if now is None or connection(now) != connection(server):
            return
        self._listings[server.name] = listing
        self.events.listing.emit(server.name)


def list_tools(server: McpServer, cancelled: Callable[[], bool], timeout_s: float = PROBE_TIMEOUT_S) -> list[ToolInfo]:
    """``server``'s tools (probe_server: started, asked, stopped), given up on as soon as
    ``cancelled()`` says so: the dialog closing never waits for a slow server. The listing goes on
    in a daemon thread and ends at its own timeout (the server's process with it). ValueError in
    words naming the server when it fails; InterruptedError when cancelled."""
    outcome: dict[str, object] = {}
    finished = threading.Event()

    def probe() -> None:
        try:
            outcome["tools"] = probe_server(server, timeout_s=timeout_s)
        except Exception as exc:  # any failure is the server's, told in words
            outcome["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=probe, name=f"list tools of {server.name}", daemon=True).start()
    while not finished.wait(CANCEL_POLL_S):
        if cancelled():
            raise InterruptedError(f"listing the tools of {server.name!r} was cancelled")
    if "error" in outcome:
        error = outcome["error"]
        words = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
        raise ValueError(words if server.name in words else f"server {server.name!r}: {words}")
    return list(outcome["tools"])  # type: ignore[call-overload]


def _imported_words(names: list[str], replaced: list[str]) -> str:
    servers = "1 server" if len(names) == 1 else f"{len(names)} servers"
    words = f"Imported {servers}: {', '.join(names)}"
    if replaced:
        words += f" ({', '.join(replaced)} replaced the server of that name, keeping its tools' switches)"
    return words
