"""The toolbox tests' servers: the real MCP fixture server (tests/toolbox/mcp_fixture_server.py) run
over stdio or streamable HTTP, and the processes it leaves (read with psutil)."""

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from draftscope.toolbox import McpServer

FIXTURE = Path(__file__).resolve().parent / "mcp_fixture_server.py"
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


@pytest.fixture
def http_fixture():
    """The fixture server on streamable HTTP (127.0.0.1, a free port it chose): yields its URL."""
    process = subprocess.Popen(
        [sys.executable, str(FIXTURE), "--http"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        first = process.stdout.readline()  # "PORT <n>", written once it listens
        assert first.startswith("PORT "), f"the HTTP fixture said {first!r}"
        yield process, f"http://127.0.0.1:{first.split()[1]}/mcp"
    finally:
        process.kill()
        process.wait(10)
