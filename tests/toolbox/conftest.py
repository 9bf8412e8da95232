"""The toolbox tests' HTTP server: the real MCP fixture server on streamable HTTP."""

import subprocess
import sys

import pytest
from mcp_helpers import FIXTURE


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
