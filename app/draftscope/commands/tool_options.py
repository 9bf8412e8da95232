"""Tools in the terminal, the options: ``--tools FILE`` (tools in OpenAI's shape, whose results the user
types in a chat, and which ``generate`` prints as JSON lines), ``--mcp CONFIG`` (the MCP servers of an
``mcpServers`` JSON file: their tools run, each call approved), ``--approve-tools`` (``generate``: calls
run without asking) and ``--tool-choice``. Everything a bad option can say is said before the model
loads; the loop itself is core/tool_turns.py's, driven at the terminal by commands/tool_loop.py."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from draftscope.core.tool_turns import ToolTurns
from draftscope.core.tools import CHOICES, ToolError, ToolRequest, tool_request

TOOLS_HELP = (
    "tools the model may call: a JSON file with a list of tools in OpenAI's shape "
    '([{"type": "function", "function": {"name", "description", "parameters"}}], or {"tools": [...]}); '
    "generate prints each call as a JSON line, chat asks you for each call's result"
)
MCP_HELP = (
    "MCP servers whose tools the model may call: a JSON file of the mcpServers shape LM Studio, Claude Desktop "
    'and Cursor use ({"mcpServers": {"NAME": {"command", "args", "env"} or {"url", "headers"}}}); chat asks '
    "before each call runs"
)
APPROVE_HELP = "run the --mcp servers' tools without asking (each call and its outcome said on stderr)"
TOOL_CHOICE_HELP = (
    "none (the tools are not shown), auto (the model decides), required (it must call one) or a tool's "
    "name (it must call that one); a required call is held to the tools' schemas. It holds for the first "
    "answer to each message (default: auto)"
)
MAX_CALLS_PER_MESSAGE = 10  # a model that calls tools for ever is stopped after this many for one message
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 60.0


def add_tool_arguments(parser, *, generate: bool = False) -> None:
    parser.add_argument("--tools", default=None, metavar="FILE", help=TOOLS_HELP)
    parser.add_argument("--mcp", default=None, metavar="CONFIG", help=MCP_HELP)
    if generate:
        parser.add_argument("--approve-tools", action="store_true", help=APPROVE_HELP)
    parser.add_argument("--tool-choice", default=None, metavar="none|auto|required|NAME", help=TOOL_CHOICE_HELP)


def read_tools(path: str | None, choice: str | None) -> ToolRequest | None:
    """``--tools`` and ``--tool-choice`` read and checked before the model loads: ValueError naming the
    file (or the choice) and the problem; None when no tools are offered."""
    if path is None:
        if choice is not None:
            raise ValueError(f"--tool-choice {choice}: there are no tools to choose from (give --tools FILE)")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            listed = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--tools {path}: {exc}") from exc
    if isinstance(listed, dict) and "tools" in listed:
        listed = listed["tools"]
    if not isinstance(listed, list) or not listed:
        raise ValueError(f'--tools {path}: the file holds a list of tools (or {{"tools": [...]}}), none found')
    return checked_request(listed, choice, f"--tools {path}")


def checked_request(listed: list, choice: str | None, where: str) -> ToolRequest | None:
    """The tools and the choice as a request would carry them; ValueError naming the option."""
    named = None if choice is None or choice in CHOICES else {"type": "function", "function": {"name": choice}}
    try:
        return tool_request({"tools": listed, "tool_choice": named or choice})
    except ToolError as exc:
        said = f"--tool-choice {choice}" if exc.param == "tool_choice" else f"{where}: {exc.param}"
        raise ValueError(f"{said}: {exc}") from exc


@dataclass
class TerminalTools:
    """The tools a command offers, read before the model loads: ``--tools FILE``'s, or the tools of the
    ``--mcp`` servers (their host started, to be closed with :meth:`close`)."""

    request: ToolRequest | None
    host: Any = None  # toolbox's ToolHost: None for --tools FILE
    route: dict[str, tuple[str, str]] | None = None
    allowed: set[tuple[str, str]] = field(default_factory=set)  # the config's alwaysAllow

    @property
    def runs(self) -> bool:
        """Whether the tools run (MCP servers), rather than the user typing their results."""
        return self.host is not None

    def close(self) -> None:
        if self.host is not None:
            self.host.close()


def read_tool_options(args) -> TerminalTools | None:
    """``--tools``/``--mcp``/``--approve-tools``/``--tool-choice`` checked, the file read, the MCP
    servers started (one that does not start is said, naming it; the others serve), as
    ``args.tools_offered``. ValueError in words, before the model loads."""
    approve = getattr(args, "approve_tools", False)
    if args.tools is not None and args.mcp is not None:
        raise ValueError("give --tools FILE or --mcp CONFIG, not both")
    if approve and args.mcp is None:
        raise ValueError("--approve-tools runs the tools of MCP servers: give them with --mcp CONFIG")
    if args.mcp is None:
        request = read_tools(args.tools, args.tool_choice)
        args.tools_offered = TerminalTools(request) if request is not None else None
    else:
        args.tools_offered = open_mcp(args.mcp, args.tool_choice)
    return args.tools_offered


def open_mcp(path: str, choice: str | None) -> TerminalTools:
    """The servers of ``path`` started and their tools listed; ValueError when none has a tool."""
    from draftscope.toolbox import ToolHost, openai_tools, read_mcp_config

    try:
        servers = [s for s in read_mcp_config(path) if s.enabled]
    except ValueError as exc:
        raise ValueError(f"--mcp {exc}") from exc
    if not servers:
        raise ValueError(f"--mcp {path}: no MCP server is enabled in it")
    host = ToolHost(servers, start_timeout_s=START_TIMEOUT_S, call_timeout_s=CALL_TIMEOUT_S)
    try:
        for name, words in host.start().items():
            print(f"draftscope: MCP server '{name}' did not start: {words}", file=sys.stderr)
        listed, route = openai_tools(host.tools())
        if not listed:
            raise ValueError(f"--mcp {path}: no tools to offer (no server started, or none lists a tool)")
        request = checked_request(listed, choice, f"--mcp {path}")
    except BaseException:
        host.close()
        raise
    allowed = {(s.name, t) for s in servers for t in s.always_allowed}
    return TerminalTools(request, host, route, allowed)


def fit_tools(args, session) -> ToolTurns | None:
    """The offered tools fitted to the loaded model as the session's calling loop, ``args.tool_turns``
    (None without tools, or with ``--tool-choice none``). ValueError, in the server's words, when the
    model's template shows it no tools, or when a required call and ``--json-schema`` would both hold
    the answer."""
    offered: TerminalTools | None = getattr(args, "tools_offered", None)
    turns = None
    if offered is not None and offered.request is not None and offered.request.choice != "none":
        request = offered.request
        choice = request.named or request.choice
        if offered.runs:
            approve = getattr(args, "approve_tools", False)
            run = _host_run(offered.host)
            turns = ToolTurns(
                session,
                request.tools,
                offered.route,
                run,
                allowed=lambda s, t: approve or (s, t) in offered.allowed,
                limit=MAX_CALLS_PER_MESSAGE,
                choice=choice,
            )
        else:  # the user types each result: every call is "approved" to be given one
            turns = ToolTurns(
                session,
                request.tools,
                None,
                None,
                allowed=lambda s, t: True,
                limit=MAX_CALLS_PER_MESSAGE,
                choice=choice,
            )
        if turns.holds_first and getattr(args, "grammar", None) is not None:
            raise ValueError("--json-schema and a required tool call cannot both hold the answer")
    args.tool_turns = turns
    return turns


def _host_run(host):
    """ToolTurns' ``run`` over a ToolHost: its call, cancelled by Stop (Ctrl-C)."""

    def run(server: str, tool: str, arguments: dict, cancel):
        return host.call(server, tool, arguments, cancel=cancel)

    return run


def calls_json(turns: ToolTurns | None, calls: list) -> str:
    """``generate --tools FILE``'s calls, a JSON object (name, arguments) a line, after its content
    ("": none); a call its length limit cut is said on stderr, not printed."""
    if turns is None or not calls:
        return ""
    for cut in (c for c in calls if c.arguments is None):
        print(f"draftscope: the answer was cut inside its call to {cut.name}: not run", file=sys.stderr)
    lines = [
        json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
        for c in calls
        if c.arguments is not None
    ]
    said = turns.reader is not None and turns.reader.content
    return ("\n" if said and lines else "") + "\n".join(lines)
