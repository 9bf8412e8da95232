"""The one thread that runs llama.cpp's computations, and how many cores llama.cpp gets.

Apart from ``llamacpp.py`` because it is a rule of the process, not of one backend: every
llama.cpp context of the process shares the thread, and ``default_threads`` is also what the
benchmarks, the doctor and RPC workers start llama.cpp with.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor

from draftscope import sysinfo

_NATIVE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama.cpp")


def serialised(method):
    """Every llama.cpp computation of the process runs on one thread at a time: the model's stepper
    (a thread named "llama.cpp ...") calls straight through; any other thread hops onto the stepper of
    the engine driving the backend (its ``home``), or onto one shared thread where none does.
    llama.cpp's OpenMP threads belong to the thread that calls it: decoding from a second thread once
    the first had decoded cost 86 ms a token instead of 58 (Qwen2.5-1.5B, 2 cores; two thread teams
    taking turns on the cores), and a bench timing the backend from its main thread made the engine's
    later steps 40-70% slower (scripts/probe_llama_threads.py)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if threading.current_thread().name.startswith("llama.cpp"):
            return method(self, *args, **kwargs)
        home = getattr(self, "home", None)  # a weak reference to the stepper of the engine that drives it
        home = home() if home is not None else None
        if home is not None:  # its thread, not a second one: a second team slowed its later steps 40-70%
            return home.call(lambda: method(self, *args, **kwargs))
        return _NATIVE.submit(method, self, *args, **kwargs).result()

    return call


def default_threads() -> int:
    return sysinfo.usable_cores()
