"""How many CPU threads a loaded llama.cpp context computes on, changed without reopening it:
Automatic threads (engine/auto_threads.py) tries all cores and all but one at load and keeps the
faster. Apart from ``llamacpp.py`` (at its size limit); the backend takes these verbs as a mixin."""

from __future__ import annotations

from typing import Any

from draftscope.engine.backends.llama.llama_thread import serialised


class ChangesThreads:
    """``cpu_threads`` and ``set_threads`` (engine/backends/base.py) for a LlamaCppBackend: its
    ``threads``, on the CPU only (with layers on a graphics card the CPU's threads decide little)."""

    threads: int
    device: object  # "cpu" where no layer sits on a card (Backend.device)
    _L: Any  # llama_cpp (llama_lib.lib())
    _ctx: Any  # the llama.cpp context (None once closed)

    def cpu_threads(self) -> int | None:
        return self.threads if self.device == "cpu" and self._ctx else None

    @serialised
    def set_threads(self, threads: int) -> None:
        """The threads a step (a token, or a draft tree) computes on, on the model's thread:
        llama.cpp's OpenMP team belongs to the thread that decodes. A prompt chunk's threads keep
        the count the context opened with: the choice was timed on steps alone, and reading a
        prompt is compute-bound, so it gains from every core where a step may not."""
        if threads < 1:
            raise ValueError(f"llama.cpp computes on at least one thread, not {threads}")
        self._L.llama_set_n_threads(self._ctx, threads, self._L.llama_n_threads_batch(self._ctx))
        self.threads = threads  # describe() says it
