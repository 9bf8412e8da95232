"""The OpenAI-compatible server beside the window (Settings ▸ Server): started, restarted and
stopped as the settings say, answering with the window's model and drafters, ``server_parallel``
answers at once beside the window's own (the engine holds a slot more than the server uses). Served answers kept in the history appear in the
conversation list as they are stored."""

from __future__ import annotations

from collections import deque

from PySide6.QtCore import QObject, Signal

from draftscope.storage.settings import Section

KEPT_REQUESTS = 200  # request log lines kept for Settings ▸ Server


class LocalServer(QObject):
    stored = Signal(int)  # a served answer's conversation id (emitted on the server's thread)
    requested = Signal(str)  # a request's log line (server/request_log.py; emitted on the server's thread)

    def __init__(self) -> None:
        super().__init__()
        self.thread = None
        self._key = None  # what the running server was started with
        self.requests: deque[str] = deque(maxlen=KEPT_REQUESTS)  # the latest log lines, oldest first

    def _log(self, line: str) -> None:
        self.requests.append(line)
        self.requested.emit(line)

    @property
    def url(self) -> str | None:
        return self.thread.url if self.thread is not None else None

    def apply(self, window, settings) -> str | None:
        """Run (or stop) the server as ``settings`` say, for ``window``'s engine; a problem (the port
        in use) comes back as text and leaves it stopped."""
        from draftscope.server import ServerConfig, ServerThread, create_app  # noqa: PLC0415  # starlette, the engine, torch

        # the same window, runtime and server settings: the server that runs is the one asked for
        key = (id(window), id(window.runtime), *(getattr(settings, name) for name in Section.SERVER.names))
        if key == self._key and (self.thread is not None) == settings.server_enabled:
            return None
        self.stop()
        self._key = key
        if not settings.server_enabled:
            return None
        config = ServerConfig(
            api_key=settings.server_api_key or None,
            keep_history=settings.server_keep_history,
            parallel=settings.server_parallel,
        )
        app = create_app(
            window.runtime, history=window.history, config=config, on_stored=self.stored.emit, on_request=self._log
        )
        try:
            self.thread = ServerThread(app, "127.0.0.1", settings.server_port).start()
        except OSError as exc:
            self.thread, self._key = None, None
            return f"The server could not start: {exc}"
        return None

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()
            self.thread = None
        self._key = None
