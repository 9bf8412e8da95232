"""Progress reports and cancellation for long builds (the CLI's bar and the GUI's wizard both
read these; nothing here knows about either)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

# The suffix sort and write after reading, in tokens per second: 8.8-9.2 M tokens/s measured on 2
# cores (docs/benchmarks.md, "Retriever: index build and search"), rounded down for slower machines.
INDEX_TOKENS_PER_SECOND = 8_000_000


def index_seconds(tokens: float) -> float:
    """About how long indexing ``tokens`` takes (the time left of a build counts it too)."""
    return tokens / INDEX_TOKENS_PER_SECOND


@dataclass(frozen=True)
class Progress:
    phase: str  # "reading" (read + tokenise), "indexing" (suffix array + write), "done"
    items: int  # documents / conversations read so far
    tokens: int
    bytes_read: int
    bytes_total: int | None  # None when unknown (e.g. while a folder is still being walked)
    elapsed: float  # seconds since the build started
    tokens_per_second: float
    eta_seconds: float | None  # reading and indexing left; None when it cannot be estimated

    @property
    def fraction(self) -> float | None:
        if not self.bytes_total:
            return None
        return min(1.0, self.bytes_read / self.bytes_total)

    @property
    def overall(self) -> float | None:
        """The whole build's share done, reading and indexing weighted by their time (time spent
        over time spent and left), for one bar over both; None while it cannot be estimated."""
        if self.phase == "done":
            return 1.0
        if self.eta_seconds is None:
            return None
        total = self.elapsed + self.eta_seconds
        return self.elapsed / total if total > 0 else 0.0


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
