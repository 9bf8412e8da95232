"""The real MCP fixture server (tests/toolbox/mcp_fixture_server.py) as a server the app reaches over
stdio, and the processes it leaves (read with psutil): shared by the toolbox, core, terminal and window
tests (a module of its own: every test folder's conftest is named conftest)."""

import sys
from pathlib import Path

import psutil

from draftscope.toolbox import McpServer

FIXTURE = Path(__file__).resolve().parent / "toolbox" / "mcp_fixture_server.py"
# Starting the fixture imports the SDK: seconds on a machine shared with other work. A start timeout is
# only a bound here; tests of a timeout use their own short one.
START_S = 60


def fixture_server(name: str = "notes", **fields) -> McpServer:
    """The fixture server over stdio, under ``name``."""
    return McpServer(name=name, command=sys.executable, args=(str(FIXTURE),), **fields)


def fixture_processes() -> list[psutil.Process]:
    """This process's running children that are fixture servers."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if str(FIXTURE) in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def alive(pids) -> list[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out
