"""``draftscope gui --quit-after MS [--screenshot PATH]``: the bundles' smoke test. The app quits that long
after its main window shows (saving the screen's picture of it first), or exits 1 when the model fails to load."""

from __future__ import annotations

import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication


def quit_after(launcher, quit_after_ms: int, screenshot: str | None) -> None:
    """The smoke test: quit ``quit_after_ms`` after the window shows (saving ``screenshot``), or
    exit 1 when the model fails to load."""

    def shown(window):
        print(f"draftscope: main window shown (model {window.engine.name} on {window.engine.device})", flush=True)
        QTimer.singleShot(quit_after_ms, lambda: _quit_with_screenshot(window, quit_after_ms, screenshot))

    def end(message):
        print(f"draftscope: the model could not be loaded: {message}", file=sys.stderr, flush=True)
        launcher.loader_thread.shutdown()  # end the thread before Qt tears it down
        QApplication.exit(1)

    def failed(message, _error=None):
        # a plain function connected to the loader's signal runs on the loader's thread, which cannot wait
        # for itself (it hung there at times): the ending runs on the launcher's, the UI thread
        QTimer.singleShot(0, launcher, lambda: end(message))

    launcher.window_ready.connect(shown)
    launcher.loader.failed.disconnect(launcher._on_failed)
    launcher.loader.failed.connect(failed)


def _quit_with_screenshot(window, quit_after_ms: int, screenshot: str | None) -> None:
    print(f"draftscope: still running after {quit_after_ms} ms; quitting", flush=True)
    saved = True
    if screenshot:  # from the screen (under xcb the X server's frame buffer), not a re-render
        saved = window.screen().grabWindow(window.winId()).save(screenshot, "PNG")
        print(
            f"draftscope: screenshot saved to {screenshot}"
            if saved
            else f"draftscope: the screenshot could not be saved to {screenshot}",
            file=sys.stdout if saved else sys.stderr,
            flush=True,
        )
    window.close()
    if saved:
        QApplication.quit()
    else:
        QApplication.exit(1)
