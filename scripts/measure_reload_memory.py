"""Resident memory of the desktop app across model reloads (issue 60, defect 7): the real launcher and
window (offscreen unless a display is set), one short answer in each window, then a setting that
reloads the model (Context length, 4,096 and 4,000 tokens in turn), and the process's RSS after each, once Qt has deleted what
it was told to and a full garbage collection ran. ``--close-only`` replaces a reload's clean-up with
what it was before the fix (the old window closed, nothing else), for the figures before.

python scripts/measure_reload_memory.py [--model default] [--reloads 5] [--threads 1] [--close-only]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import os
import tempfile
import time
import weakref
from pathlib import Path


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_for(signal, start, timeout_s: float = 600.0):
    """``start()``, then the event loop runs until ``signal`` is emitted; its first argument."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop, got = QEventLoop(), []

    def heard(*args):
        got.append(args[0] if args else None)
        loop.quit()

    signal.connect(heard)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    start()
    loop.exec()
    signal.disconnect(heard)
    if not got:
        raise SystemExit(f"nothing heard within {timeout_s:.0f} s")
    return got[0]


def settle() -> None:
    """What the event loop would do next (deferred deletes, zero timers), then a full collection."""
    from PySide6.QtCore import QCoreApplication, QEvent

    for _ in range(3):
        QCoreApplication.processEvents()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
    gc.collect()


def ask(window) -> None:
    """One short answer in the window, as a user would ask it (the model's thread and cache in use)."""
    window.chat_input.setPlainText("Say hello in five words.")
    wait_for(window.answer_signals.answer_ended, window.send, timeout_s=300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="the model's CPU threads (steadier on a busy machine)")
    parser.add_argument(
        "--close-only", action="store_true", help="a reload only closes the old window (before the fix)"
    )
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    scratch = Path(tempfile.mkdtemp(prefix="reload-memory-"))
    os.environ["DRAFTSCOPE_DATA_DIR"] = str(scratch / "data")  # learned answers and heads: not the user's

    from PySide6.QtWidgets import QApplication

    from draftscope.core.runtime import load_runtime
    from draftscope.gui import launcher as launcher_module
    from draftscope.storage import HistoryStore, Settings

    app = QApplication.instance() or QApplication([])
    if args.close_only:
        launcher_module._let_go = lambda previous, runtime: previous.close()
    settings = Settings(model=args.model, threads=args.threads, context_length=4000, max_new_tokens=16)
    launcher = launcher_module.Launcher(
        functools.partial(load_runtime, baseline=False),
        HistoryStore(scratch / "history.sqlite3"),
        settings,
        settings_file=scratch / "settings.json",
    )
    started = time.perf_counter()
    window = wait_for(launcher.window_ready, launcher.start)
    ask(window)
    settle()
    engine = window.engine
    replaced = []  # weak references to each replaced window's engine
    mode = "close only (before the fix)" if args.close_only else "as the app does now"
    print(f"model {engine.name} on {engine.backend.describe()}; reloads: {mode}")
    del engine  # the script must not keep it
    print(f"start: RSS {rss_mib():,.0f} MiB")
    for n in range(1, args.reloads + 1):
        context = 4096 if n % 2 else 4000
        change = dataclasses.replace(launcher.settings, context_length=context)
        replaced.append(weakref.ref(window.engine))
        del window
        began = time.perf_counter()
        window = wait_for(launcher.window_ready, lambda change=change: launcher.apply_settings(change))
        ask(window)
        settle()
        alive = sum(ref() is not None for ref in replaced)
        seconds = time.perf_counter() - began
        print(f"after reload {n} (Context length {context:,}): RSS {rss_mib():,.0f} MiB; ", end="")
        print(f"replaced engines alive: {alive} ({seconds:.0f} s)")
    print(f"({time.perf_counter() - started:.0f} s)")
    window.close()
    launcher.server.stop()
    app.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
