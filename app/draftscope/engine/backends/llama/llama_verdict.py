"""Does the installed llama.cpp run on this CPU? Asked before the first GGUF model opens on it, and
again whenever llama-cpp-python's files or the CPU change: the self-test (selftest.py) runs in a
child process, so a kernel that faults ends the child, never the app.

The answer, kept in the cache folder: llama.cpp runs as built; or it runs only with its weights
in their plain layout (the repacked kernels, AMX among them, fault): GGUF models then open on
llama.cpp without them, slower, with a notice; or it does not run at all: GGUF models open on
torch, with a notice naming the cause and the fix (rerun set-up, which rebuilds llama.cpp without
the kernels that fault)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from draftscope import paths
from draftscope.engine.stages import CHECKING_LLAMA, Stage

CHECK_TIMEOUT_S = 120.0
FIX = "rerun `bash scripts/setup.sh`, which rebuilds llama.cpp without the kernels that fail"


@dataclass(frozen=True)
class Verdict:
    runs: bool  # GGUF models can open on llama.cpp here
    repacked: bool  # ... with their weights repacked for this CPU's fastest kernels
    notice: str | None = None  # what was turned off, why, and the fix (None: nothing)
    cause: str | None = None  # the self-test's words on how it failed


_lock = threading.Lock()  # one check at a time: the window and the server may open models together


def verdict(*, check: bool = True, progress=None, threads: int | None = None) -> Verdict | None:
    """This llama.cpp's verdict on this CPU: the kept one, else (``check``) the self-test's, run
    now with the app's ``threads`` (kept only when it says something lasting about this CPU: see ``judge``). None when nothing
    is kept and ``check`` is off: that look-up never waits for a check in progress (the dialogs ask
    it on the UI thread)."""
    key = _key()
    kept = _kept_verdict(key)
    if kept is not None or not check:
        return kept
    with _lock:
        kept = _kept_verdict(key)  # a check that ran while this one waited
        if kept is not None:
            return kept
        if progress is not None:
            progress(Stage(CHECKING_LLAMA))  # once per llama.cpp build and CPU: its length is not known
        found, lasting = judge(threads=threads)
        if lasting:
            _keep(key, found)
    return found


def judge(command: list[str] | None = None, *, threads: int | None = None) -> tuple[Verdict, bool]:
    """(the verdict, whether it lasts): the self-test as built, then, if it fails, with the weights
    in their plain layout. A failure lasts (is kept) only when it is the CPU's: a death by a signal
    in a kernel, or the same failure twice; a timeout on a busy machine or a one-off error (a full
    /tmp) is reported now and checked again at the next start."""
    # here, not at the top: this module loads with the package, and the self-test's child runs
    # `python -m ...selftest`: imported at the top, selftest would be imported twice there (runpy warns)
    import draftscope.engine.backends.llama.selftest as selftest  # noqa: PLC0415  # see above

    def check(repacked: bool = True):
        return selftest.run(repacked=repacked, timeout=CHECK_TIMEOUT_S, command=command, threads=threads)

    first = check()
    if first.ok:
        return Verdict(True, True), True
    if not _lasting(first, check):
        return Verdict(
            False,
            False,
            f"GGUF models run on torch for now because {first.message} (checked again at the next start)",
            first.message,
        ), False
    plain = check(repacked=False)
    if plain.ok:
        return Verdict(
            True,
            False,
            f"llama.cpp runs without its repacked kernels here, which is slower: {first.message}. "
            f"To get them back, {FIX}",
            first.message,
        ), True
    return Verdict(
        False,
        False,
        f"GGUF models run on torch (de-quantised: slower, and more memory) because "
        f"{first.message}. To run them on llama.cpp, {FIX}",
        first.message,
    ), True


def _lasting(failed, again) -> bool:
    """Whether the self-test's failure ``failed`` is the CPU's: a death by a signal, or a failure
    (not a timeout) that ``again()`` repeats in the same words."""
    if failed.signal is not None:
        return True
    if failed.timed_out:
        return False
    repeat = again()
    return not repeat.ok and not repeat.timed_out and repeat.message == failed.message


def forget() -> None:
    """Drop every kept verdict (after set-up installs another llama.cpp, or in tests)."""
    paths.llama_verdict_file().unlink(missing_ok=True)


def _key() -> str:
    """llama-cpp-python's library files (name, size, time) and the CPU's feature flags."""
    parts = []
    spec = importlib.util.find_spec("llama_cpp")
    if spec is not None and spec.origin:
        folder = Path(spec.origin).parent
        for lib in sorted([*folder.glob("lib/*.so*"), *folder.glob("lib/*.dylib"), *folder.glob("lib/*.dll")]):
            st = lib.stat()
            parts.append(f"{lib.name}:{st.st_size}:{st.st_mtime_ns}")
    parts.append(_cpu_flags())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[-1].strip()
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


def _kept_verdict(key: str) -> Verdict | None:
    entry = _kept().get(key)
    if not isinstance(entry, dict):  # nothing kept (or not an entry)
        return None
    try:
        return Verdict(**entry)
    except TypeError:  # a damaged entry
        return None


def _kept() -> dict:
    try:
        kept = json.loads(paths.llama_verdict_file().read_text())
        return kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        return {}


def _keep(key: str, found: Verdict) -> None:
    """Keep the verdict for the next start; a cache folder that cannot be written only means the
    check runs again then (it must not fail the load that asked)."""
    store = paths.llama_verdict_file()
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        kept = _kept()
        kept[key] = asdict(found)
        tmp = store.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(list(kept.items())[-20:])))
        os.replace(tmp, store)
    except OSError:
        pass
