"""Starting the desktop app: settings, history, the model loaded off the UI thread behind a busy
indicator, then the main window. ``draftscope`` with no arguments runs :func:`main`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from PySide6.QtCore import QMetaObject, QObject, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QApplication, QMessageBox, QProgressDialog

from draftscope.gui.worker import WorkerThread


class ModelLoader(QObject):
    loaded = Signal(object)
    failed = Signal(str)

    def __init__(self, factory) -> None:
        super().__init__()
        self.factory = factory

    @Slot()
    def load(self) -> None:
        try:
            self.loaded.emit(self.factory())
        except Exception as exc:  # shown to the user with a retry
            self.failed.emit(f"{type(exc).__name__}: {exc}")


def drafter_factory(settings):
    """A function making fresh drafters per answer from the settings (readers are shared)."""
    from draftscope.datastore.default import default_datastore_path
    from draftscope.engine.drafters import ContextDrafter, RetrievalDrafter
    from draftscope.retrieval import Reader

    path = Path(settings.datastore) if settings.datastore else default_datastore_path()
    reader = Reader(path) if settings.drafters.get("retrieval") and path.is_file() else None
    use_context = settings.drafters.get("context", True)

    def make():
        made = []
        if reader is not None:
            made.append(RetrievalDrafter(reader))
        if use_context:
            made.append(ContextDrafter())
        return made

    return make, (str(path) if reader is not None else "none")


class Launcher(QObject):
    """Loads the engine on a worker thread, then opens the main window."""

    window_ready = Signal(object)

    def __init__(self, engine_factory, history, settings, notices=()) -> None:
        super().__init__()
        self.history, self.settings, self.notices = history, settings, list(notices)
        self.window = None
        self.error_box = None
        self.loader = ModelLoader(engine_factory)
        self.loader_thread = WorkerThread(self.loader)
        self.loader.loaded.connect(self._on_loaded)
        self.loader.failed.connect(self._on_failed)
        self.progress = QProgressDialog(f"Loading {settings.model} …", "Quit", 0, 0)
        self.progress.setWindowTitle("Draftscope")
        self.progress.setObjectName("loadingDialog")
        self.progress.canceled.connect(QApplication.quit)

    def start(self) -> None:
        self.progress.show()
        QMetaObject.invokeMethod(self.loader, "load", Qt.ConnectionType.QueuedConnection)

    def _on_loaded(self, engine) -> None:
        from draftscope.gui.main_window import MainWindow

        # close() would emit canceled (wired to quit): hide the dialog instead
        self.progress.hide()
        self.loader_thread.shutdown()
        make, label = drafter_factory(self.settings)
        self.window = MainWindow(engine, self.history, self.settings, drafters=make, datastore_label=label)
        self.window.show()
        for notice in self.notices:
            self.window.statusBar().showMessage(notice, 15000)
        self.window_ready.emit(self.window)

    def _on_failed(self, message: str) -> None:
        self.progress.hide()
        box = QMessageBox(QMessageBox.Icon.Critical, "Draftscope",
                          f"The model could not be loaded:\n\n{message}\n\nCheck the model in the settings file, "
                          "the network (for the default model's first download), or the disk space.")
        box.setObjectName("loadErrorDialog")
        retry = box.addButton("Retry", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Quit", QMessageBox.ButtonRole.RejectRole)
        box.buttonClicked.connect(lambda b: self._retry() if b is retry else QApplication.quit())
        self.error_box = box
        box.open()

    def _retry(self) -> None:
        self.progress.show()
        QMetaObject.invokeMethod(self.loader, "load", Qt.ConnectionType.QueuedConnection)


def _has_display() -> bool:
    if sys.platform != "linux" or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main(*, model: str | None = None, quit_after_ms: int | None = None) -> int:
    """Run the app. ``quit_after_ms`` (``draftscope gui --quit-after``) is a smoke test for bundles:
    quit that long after the main window shows, exit 1 if the model fails to load."""
    if not _has_display():
        print("draftscope: no display found (DISPLAY/WAYLAND_DISPLAY unset). Run `draftscope chat` for the terminal "
              "chat, or set QT_QPA_PLATFORM.", file=sys.stderr)
        return 2
    from draftscope.engine.engine import Engine
    from draftscope.storage import HistoryStore, load_settings

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Draftscope")
    settings, notices = load_settings()
    if model:
        settings.model = model
    history = HistoryStore()
    device = None if settings.device == "auto" else settings.device
    launcher = Launcher(lambda: Engine.load(settings.model, device=device), history, settings, notices)
    if quit_after_ms is not None:
        def shown(window):
            print(f"draftscope: main window shown (model {window.engine.name} on {window.engine.device})", flush=True)

            def done():
                print(f"draftscope: still running after {quit_after_ms} ms; quitting", flush=True)
                window.close()
                QApplication.quit()

            QTimer.singleShot(quit_after_ms, done)

        def failed(message):
            print(f"draftscope: the model could not be loaded: {message}", file=sys.stderr, flush=True)
            QApplication.exit(1)

        launcher.window_ready.connect(shown)
        launcher.loader.failed.disconnect(launcher._on_failed)
        launcher.loader.failed.connect(failed)
    launcher.start()
    return app.exec()
