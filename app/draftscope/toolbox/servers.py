"""The MCP servers a user adds: a command run over stdio, or a URL spoken to over streamable HTTP.

Plain data and checks (no `mcp` import): Settings keep each server as `McpServer.to_dict()`, the
terminal's `--mcp FILE` and Settings' import read the `mcpServers` JSON that LM Studio, Claude Desktop
and Cursor write (`servers_from_json`). Every problem is said in words naming the server and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_NAME = 64  # characters: a server's name is shown in every card and message about it
# Transport names other clients write in an entry's "type"; SSE (the older HTTP transport) is not spoken
HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp", "streamablehttp")
# Keys other clients write that carry the same meaning as ours (Cline and Roo: off, tools run unasked)
DISABLED_KEYS = ("disabled",)
ALWAYS_KEYS = ("alwaysAllow", "autoApprove")


@dataclass(frozen=True)
class McpServer:
    """One MCP server: how to reach it and what the user decided about its tools."""

    name: str  # unique; every message about it names it
    command: str = ""  # stdio: the program (else url)
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # added to the inherited safe environment
    url: str = ""  # streamable HTTP
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    disabled_tools: tuple[str, ...] = ()  # tools the user switched off
    always_allowed: tuple[str, ...] = ()  # tools run without asking ("always for this tool")

    @property
    def kind(self) -> str:
        """ "stdio" (a command) or "http" (a URL)."""
        return "http" if self.url and not self.command else "stdio"

    def problems(self) -> list[str]:
        """What keeps this server from being used, each in words naming the server and the field."""
        name = self.name if isinstance(self.name, str) else ""
        out = [f"server {name!r}: {p}" for p in _field_problems(self)] if name.strip() else []
        if not name.strip():
            out.append("a server needs a name")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lists for tuples): what Settings keep."""
        return {
            "name": self.name,
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
            "url": self.url,
            "headers": dict(self.headers),
            "enabled": self.enabled,
            "disabled_tools": list(self.disabled_tools),
            "always_allowed": list(self.always_allowed),
        }

    @classmethod
    def from_dict(cls, d: dict) -> McpServer:
        """A server from `to_dict`'s shape (missing keys take their defaults, unknown ones are left: a
        newer version's field); ValueError naming the problem (a field of the wrong type, no name,
        neither a command nor a URL)."""
        if not isinstance(d, dict):
            raise ValueError(f"a server must be an object, not {type(d).__name__}")
        name = d.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a server needs a name (text)")
        server = cls(
            name=name,
            command=_text(d, "command", name),
            args=tuple(_texts(d, "args", name)),
            env=_mapping(d, "env", name),
            url=_text(d, "url", name),
            headers=_mapping(d, "headers", name),
            enabled=_flag(d, "enabled", name),
            disabled_tools=tuple(_texts(d, "disabled_tools", name)),
            always_allowed=tuple(_texts(d, "always_allowed", name)),
        )
        problems = server.problems()
        if problems:
            raise ValueError(problems[0])
        return server


def _field_problems(server: McpServer) -> list[str]:
    """The fields' problems (the name is known to be there)."""
    out = []
    if len(server.name) > MAX_NAME or server.name != server.name.strip():
        out.append(f'"name" must be at most {MAX_NAME} characters, without spaces around it')
    if any(ord(c) < 32 for c in server.name):
        out.append('"name" holds a control character')
    if server.command and server.url:
        out.append('has both a "command" and a "url": give one')
    elif not server.command.strip() and not server.url.strip():
        out.append('has neither a "command" (stdio) nor a "url" (streamable HTTP)')
    if server.url and not server.url.startswith(("http://", "https://")):
        out.append(f'"url" must start with http:// or https:// (it is {server.url!r})')
    for key, value in (*server.env.items(), *server.headers.items()):
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            out.append(f'"env" and "headers" map names to text ({key!r} does not)')
            break
    return out


def _text(d: dict, key: str, name: str) -> str:
    value = d.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f"server {name!r}: {key!r} must be text, not {type(value).__name__}")
    return value


def _texts(d: dict, key: str, name: str) -> list[str]:
    value = d.get(key, [])
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"server {name!r}: {key!r} must be a list of text")
    return list(value)


def _mapping(d: dict, key: str, name: str) -> dict[str, str]:
    value = d.get(key, {})
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"server {name!r}: {key!r} must map names to text")
    return dict(value)


def _flag(d: dict, key: str, name: str) -> bool:
    value = d.get(key, True)
    if not isinstance(value, bool):
        raise ValueError(f"server {name!r}: {key!r} must be true or false")
    return value


def servers_from_json(text: str) -> list[McpServer]:
    """The servers of an `mcpServers` JSON (LM Studio, Claude Desktop, Cursor; VS Code's `servers`
    too): `{"mcpServers": {name: {"command", "args", "env"} | {"url", "headers"[, "type"]}}}`.
    ValueError in words naming what is wrong and where."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict):
        raise ValueError('expected an object with "mcpServers", not ' + type(data).__name__)
    key = next((k for k in ("mcpServers", "servers") if k in data), None)
    if key is None:
        raise ValueError('no "mcpServers" object in it (the shape is {"mcpServers": {"name": {"command": ...}}})')
    entries = data[key]
    if not isinstance(entries, dict):
        raise ValueError(f'"{key}" must be an object of servers by name, not {type(entries).__name__}')
    return [_server_from_entry(name, entry) for name, entry in entries.items()]


def _server_from_entry(name: str, entry: object) -> McpServer:
    """One `mcpServers` entry as a server; ValueError naming it."""
    if not isinstance(entry, dict):
        raise ValueError(f"server {name!r} must be an object, not {type(entry).__name__}")
    kind = entry.get("type", "")
    if not isinstance(kind, str):
        raise ValueError(f'server {name!r}: "type" must be text')
    if kind == "sse":
        raise ValueError(f"server {name!r} uses SSE, the older HTTP transport: give its streamable HTTP URL")
    if kind and kind != "stdio" and kind not in HTTP_TYPES:
        raise ValueError(f'server {name!r}: unknown "type" {kind!r} (stdio or http)')
    url_key = "url" if "url" in entry else "serverUrl"  # Windsurf writes serverUrl
    disabled = next((entry[k] for k in DISABLED_KEYS if k in entry), False)
    if not isinstance(disabled, bool):
        raise ValueError(f'server {name!r}: "disabled" must be true or false')
    always: object = next((entry[k] for k in ALWAYS_KEYS if k in entry), [])
    return McpServer.from_dict(
        {
            "name": name,
            "command": entry.get("command", ""),
            "args": entry.get("args", []),
            "env": entry.get("env", {}),
            "url": entry.get(url_key, ""),
            "headers": entry.get("headers", {}),
            "enabled": not disabled,
            "always_allowed": always,
        }
    )


def servers_to_json(servers: Iterable[McpServer]) -> str:
    """The `mcpServers` JSON of these servers (what `servers_from_json` reads back): a server that is
    off says `"disabled": true`, and its always-allowed tools `"alwaysAllow"` (Cline's and Roo's keys)."""
    entries: dict[str, dict[str, Any]] = {}
    for server in servers:
        if server.kind == "http":
            entry: dict[str, Any] = {"type": "http", "url": server.url}
            if server.headers:
                entry["headers"] = dict(server.headers)
        else:
            entry = {"command": server.command, "args": list(server.args)}
            if server.env:
                entry["env"] = dict(server.env)
        if not server.enabled:
            entry["disabled"] = True
        if server.always_allowed:
            entry["alwaysAllow"] = list(server.always_allowed)
        entries[server.name] = entry
    return json.dumps({"mcpServers": entries}, indent=2, ensure_ascii=False)


def read_mcp_config(path: str) -> list[McpServer]:
    """The servers of an `mcpServers` JSON file (the terminal's `--mcp`); ValueError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from None
    try:
        return servers_from_json(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
