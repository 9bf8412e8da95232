"""The OpenAI-compatible local server (``draftscope serve``, and the app's Server menu).

:func:`create_app` builds the ASGI app; :class:`ServerThread` runs it with uvicorn on a thread of
its own (the app and the tests), :func:`serve` in the foreground (the command)."""

from __future__ import annotations

import errno
import signal
import socket
import threading
import time

from draftscope.server.asgi import ServerConfig, check_bind, create_app

__all__ = ["ServerConfig", "ServerThread", "check_bind", "create_app", "listening_socket", "serve"]


def _server(app, host: str, port: int):
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    return uvicorn.Server(config)


def serve(app, host: str, port: int, sock: socket.socket | None = None) -> None:
    """Serve until interrupted (Ctrl-C, or SIGTERM from a service manager); on ``sock`` when given
    (see listening_socket). Either way the caller's clean-up runs: uvicorn raises the signal again
    once it has shut down, and a SIGTERM left to its default handler would end the process there,
    before the engine saves its conversations' caches."""
    previous = signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        _server(app, host, port).run(sockets=[sock] if sock is not None else None)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_term(signum, frame) -> None:
    raise SystemExit(0)  # a server asked to stop has stopped: not an error


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, made before the model loads (a busy port costs
    nothing and is named) and handed to uvicorn, so nothing can take the port in between (connections
    made meanwhile wait in its backlog). Raises OSError."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: no such address ({exc.strerror})") from None
    # a name with both (localhost on hosts that list ::1 first): IPv4, which every client tries
    family, kind, proto, _, address = next((f for f in found if f[0] == socket.AF_INET), found[0])
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a port just freed is usable
    try:
        sock.bind(address)
        sock.listen(128)  # listening at once: a bound socket that is not can be bound again by another
    except OSError as exc:
        sock.close()
        why = (
            "the port is in use (another server? choose another with --port)"
            if exc.errno == errno.EADDRINUSE
            else exc.strerror or str(exc)
        )
        raise OSError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


class ServerThread:
    """uvicorn on a daemon thread: ``start()`` returns once it listens (or raises why it cannot),
    ``stop()`` ends it."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 8911) -> None:
        self.app, self.host, self.port = app, host, port
        self._server = _server(app, host, port)
        self._thread = threading.Thread(target=self._run, name="draftscope-server", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run()
        except BaseException as exc:  # reported by start()
            self.error = exc

    def start(self, timeout: float = 20.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise OSError(
                    f"the server could not listen on {self.host}:{self.port}"
                    + (f": {self.error}" if self.error else " (is the port in use?)")
                )
            time.sleep(0.02)
        if self.port == 0:  # an ephemeral port: read back the one the socket got
            self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
