"""A real MCP server for the toolbox tests, written with the `mcp` SDK: run it as
`python tests/toolbox/mcp_fixture_server.py` (stdio) or with `--http` (streamable HTTP on 127.0.0.1, a
free port, printed as `PORT <n>` on its first stdout line).

Its tools cover what a user's server can do to the app: answer, answer 1 MB, fail (an isError result),
die mid-call, hang, write something that is not MCP. Environment: MCP_FIXTURE_EXIT_AT_START=1 makes it
exit at once (after a line on stderr); MCP_FIXTURE_GARBAGE=1 makes it write lines that are not MCP and
never answer; MCP_FIXTURE_STUBBORN=1 keeps it running after its stdin ends (only a signal ends it)."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

# Before the SDK's imports (seconds on a busy machine): a server that exits at start does so at once
if __name__ == "__main__" and os.environ.get("MCP_FIXTURE_EXIT_AT_START") == "1":
    print("fixture server: told to exit at start", file=sys.stderr, flush=True)
    sys.exit(3)
if __name__ == "__main__" and os.environ.get("MCP_FIXTURE_GARBAGE") == "1":
    print("Welcome to the fixture server! (not JSON)", flush=True)
    print("<html>also not JSON</html>", flush=True)
    time.sleep(3600)

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NOTE = "Harbour log, entry 7\nThe lighthouse keeper counted 41 gulls.\nWind: north-north-east, force 5.\n"
STARTED_MARK = "fixture server: ready"
WIRE = os.dup(1)  # stdout as the client reads it (the SDK points fd 1 at stderr while it serves)


def build() -> MCPServer:
    server = MCPServer("fixture", instructions="Tools for the Draftscope toolbox tests.")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @server.tool()
    def read_note(name: str) -> str:
        """Read the note of that name."""
        return f"Note '{name}':\n{NOTE}"

    @server.tool()
    def big_result(kilobytes: int) -> str:
        """Return that many kilobytes of text (lines of 64 characters, numbered)."""
        lines = [
            f"{i:08d} " + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU"[:54] + "\n"
            for i in range(kilobytes * 16)
        ]
        return "".join(lines) + "END"

    @server.tool()
    def crash() -> str:
        """Die in the middle of the call."""
        print("fixture server: crashing on purpose", file=sys.stderr, flush=True)
        os._exit(7)

    @server.tool()
    async def hang(seconds: float) -> str:
        """Sleep that long before answering."""
        await anyio.sleep(seconds)
        return "woke up"

    @server.tool()
    def fail() -> str:
        """Raise an error: the result says isError."""
        raise ToolError("the fixture failed on purpose")

    @server.tool()
    def env_value(name: str) -> str:
        """The value of an environment variable (empty when unset)."""
        return os.environ.get(name, "")

    @server.tool()
    async def garbage() -> str:
        """Write a line that is not MCP where the answer should be, and never answer."""
        os.write(WIRE, b"this line is not JSON-RPC\n")
        await anyio.sleep(3600)
        return "never"

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    return server


def serve_http(server: MCPServer) -> None:
    """Streamable HTTP on a socket bound here (port 0: a free one), its port printed first."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn serves: the port is usable once printed
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    anyio.run(uvicorn.Server(config).serve, [sock])


def main() -> None:
    if os.environ.get("MCP_FIXTURE_STUBBORN") == "1":  # outlives its stdin's end: only a kill ends it
        threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    print(STARTED_MARK, file=sys.stderr, flush=True)
    server = build()
    if "--http" in sys.argv:
        serve_http(server)
    else:
        server.run()


if __name__ == "__main__":
    main()
