"""Small facts about this process, for reports and benchmarks."""

from __future__ import annotations

import ctypes
import gc
import os
import resource
import sys
from pathlib import Path


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB. VmHWM, not ru_maxrss: Linux carries
    ru_maxrss over exec, so a spawned child would report its parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def freeze_loaded_objects() -> None:
    """Collect once, then exempt everything alive from future garbage collections (gc.freeze).

    A loaded model leaves ~400k long-lived Python objects (torch modules, tokenizer tables); a
    full collection walks them all (~0.3 s here), and it can start on whichever thread allocates,
    the UI thread included. Called once after a model is loaded, so later collections only walk
    what was made since."""
    gc.collect()
    give_back_free_memory()
    gc.freeze()


def give_back_free_memory() -> None:
    """The C heap's free pages given back to the system (glibc's malloc_trim): freed memory otherwise
    stays in the process's resident size, ~35 MB more after each model reload (issue 60)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the OS says; else all of them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
