"""Progress reports and cancellation for long builds (the CLI's bar and the GUI's wizard both
read these; nothing here knows about either)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    phase: str  # "reading" (read + tokenise), "indexing" (suffix array + write), "done"
    items: int  # documents / conversations read so far
    tokens: int
    bytes_read: int
    bytes_total: int | None  # None when unknown (e.g. while a folder is still being walked)
    elapsed: float  # seconds since the build started
    tokens_per_second: float
    eta_seconds: float | None  # None when it cannot be estimated

    @property
    def fraction(self) -> float | None:
        if not self.bytes_total:
            return None
        return min(1.0, self.bytes_read / self.bytes_total)


ProgressCallback = Callable[[Progress], None]


class CancelToken:
    """Set from any thread; the build checks it between batches (well under a second apart) and
    forwards it to the index writer, which checks it between phases of the final sort/write."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            callbacks = list(self._callbacks)
        for cb in callbacks:
            cb()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)
