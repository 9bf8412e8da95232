"""Starting the desktop app: settings, history, the model loaded off the UI thread behind a busy
indicator, then the main window. ``draftscope`` with no arguments runs :func:`main`.

The first launch (no settings file) shows the first-run dialog. The runtime then loads on a thread of its own
behind the loading dialog (gui/loading.py: each stage by name); only the verify costs are measured at load, the
plain-speed baseline after the window opens. Settings changed in the dialog apply at once (theme, font,
sampling, system prompt), from the next answer (datastore, drafters) or by a reload (the model section,
storage/settings.py: the model, device, precision...). A reload is a transaction: its settings are saved only
once the new model has opened; a failed one leaves the running model, the window and the settings file as they
were and offers Retry, another model, or keeping the current one; one that opened frees the window and model it
replaced (_let_go). Each new loader ends the last one's thread first (Qt aborts when a running QThread is dropped).
The MCP servers (gui/tool_host_qt.py) are the launcher's, not a window's: started once the first window shows,
again when Settings ▸ Tools change, kept across a reload, and closed when the app quits.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import sys
from pathlib import Path

from PySide6.QtCore import QMetaObject, QObject, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QApplication, QDialog, QMessageBox, QProgressDialog

from draftscope import paths
from draftscope.core.runtime import load_runtime
from draftscope.core.settings_change import SettingsEvents
from draftscope.gui import window_memory
from draftscope.gui.dialogs.first_run import FirstRunDialog, needs_first_run
from draftscope.gui.dialogs.recurrent_head import head_description
from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.gui.dialogs.torch_install import install_action
from draftscope.gui.generation_worker import WorkerThread
from draftscope.gui.loading import LoadingProgress, release, show_over
from draftscope.gui.main_window import MainWindow
from draftscope.gui.platform_check import xcb_problem
from draftscope.gui.server_control import LocalServer
from draftscope.gui.smoke_run import quit_after
from draftscope.gui.theme import app_icon, apply_theme, code_style, effective_theme
from draftscope.gui.tool_host_qt import ToolHostQt
from draftscope.optional_torch import TorchMissing
from draftscope.storage import HistoryStore, load_settings, save_settings
from draftscope.storage.settings import MAX_RECENT, Change, change_between
from draftscope.sysinfo import freeze_loaded_objects


class ModelLoader(QObject):
    loaded = Signal(object)  # the Runtime
    failed = Signal(str, object)  # in words; the exception (PyTorch missing: the box offers to install it)
    progress = Signal(object)  # the load's stage (engine/stages.py), or a line of text

    def __init__(self, factory) -> None:
        super().__init__()
        self.factory = factory

    @Slot()
    def load(self) -> None:
        try:
            runtime = self.factory()
            freeze_loaded_objects()  # here, off the UI thread, not as a pause in the middle of an answer
            self.loaded.emit(runtime)
        except Exception as exc:  # shown to the user with a retry
            self.failed.emit(str(exc) if isinstance(exc, TorchMissing) else f"{type(exc).__name__}: {exc}", exc)


class Launcher(QObject):
    """Loads the runtime (draftscope.core.runtime) on a worker thread, then opens the main window;
    applies the settings the user changes (live where it can, reloading the model when the model,
    device, precision, backend or draft model changed).

    ``runtime_factory(settings, log)`` loads a Runtime for the given settings (default: load_runtime,
    leaving the plain-speed measurement to the window), telling ``log(stage)`` of its progress, which
    the loading dialog shows (gui/loading.py). A runtime whose plain speed is not measured yet has it
    measured once the window is open, in the background.
    """

    window_ready = Signal(object)

    def __init__(self, runtime_factory, history, settings, notices=(), *, settings_file=None) -> None:
        super().__init__()
        self.history, self.settings, self.notices = history, settings, list(notices)
        self.settings_file = settings_file
        self.settings_dialog = None
        self.window = None
        self.error_box = None
        self.runtime_factory = runtime_factory
        self.loader_thread = None
        self.loading = False  # a load under way: settings changes wait for it
        self.running_settings = None  # what the window's model was opened with, while a switch is tried
        self._new_loader()
        # quitting while a load is under way (or after a failed one) must end that thread first
        QApplication.instance().aboutToQuit.connect(lambda: self.loader_thread and self.loader_thread.shutdown())
        self.progress = QProgressDialog(f"Loading {settings.model} …", "Quit", 0, 0)
        self.progress.setWindowTitle("Draftscope")
        self.progress.setObjectName("loadingDialog")
        self.progress.canceled.connect(QApplication.quit)
        self.stages = LoadingProgress(self.progress)
        self.server = LocalServer()  # Settings ▸ Server: beside the window, over its model
        self.server.stored.connect(lambda cid: self.window and self.window.served_answer_stored(cid))
        QApplication.instance().aboutToQuit.connect(self.server.stop)
        QApplication.instance().aboutToQuit.connect(lambda: self.window and self._keep_window(self.window))
        self.tool_host = ToolHostQt()  # the MCP servers: no orphan process once the app has quit
        QApplication.instance().aboutToQuit.connect(self.tool_host.close)
        self.changes = self._settings_events()

    def _settings_events(self):
        """What a settings change does here, each heard as its own event (core/settings_change.py)."""
        changes = SettingsEvents()
        changes.look.connect(self._apply_look)
        changes.tools.connect(lambda _old, new: self.tool_host.apply(new))  # the servers started again
        changes.model.connect(self._load_with)
        changes.server.connect(self._server_changed)
        changes.drafters.connect(self._drafters_changed)
        return changes

    def _new_loader(self) -> None:
        """A loader on its own thread, for the first load and each reload; it ends once loaded. The
        last one (left running after a failed load, for Retry) is ended first: a QThread dropped
        while it runs aborts the app."""
        if self.loader_thread is not None:
            self.loader_thread.shutdown()
        self.loader = ModelLoader(lambda: self.runtime_factory(self.settings, log=self.loader.progress.emit))
        self.loader_thread = WorkerThread(self.loader)
        self.loader.progress.connect(self._show_progress)
        self.loader.loaded.connect(self._on_loaded)
        self.loader.failed.connect(self._on_failed)

    def _show_progress(self, report) -> None:
        if not self.loading or (isinstance(report, str) and report.startswith("loading ")):  # the heading says so
            return
        self.stages.report(report)

    def start(self) -> None:
        self._retry()

    def _on_loaded(self, runtime) -> None:
        # close() would emit canceled (wired to quit): hide the dialog instead
        self.loading = False
        self.stages.end()
        self.progress.hide()
        self.loader_thread.shutdown()
        notes = _drafter_notes(runtime)
        self.running_settings = None  # the switch went through: its settings are the ones kept
        if self.window is not None:  # a reload: the new window takes this one's shape, panels and conversation
            window_memory.remember(self.window, self.settings)
        self._remember_model()
        previous, self.window = self.window, None
        theme = effective_theme(self.settings.theme)
        self.window = MainWindow(
            runtime, self.history, code_style=code_style(theme), dark=theme == "dark", tool_host=self.tool_host
        )
        self.window.tool_loop.settings_changed.connect(self._keep_tool_settings)
        self.window.settings_requested.connect(self.open_settings)
        self.window.model_chosen.connect(
            lambda spec: self.apply_settings(dataclasses.replace(self.settings, model=spec))
        )
        self.window.datastore_chosen.connect(self.use_datastore)
        window_memory.restore(self.window, self.settings)  # as the last window left it, or the file says
        window_memory.WindowKeeper(self.window, self._keep_window)
        if previous is not None:
            window_memory.carry_unsent(previous, self.window)  # a new conversation's folder, in no history yet
            release(self.progress)  # shown over the window being let go: not deleted with it
            _let_go(previous, runtime)
        self.window.show()
        if previous is None:  # the first window: the MCP servers start behind it
            self.tool_host.apply(self.settings)
        if runtime.engine.baseline_measured_at is None:  # measured now, behind the open window
            self.window.measure_baseline()
        server_problem = self._apply_server()
        backend_notice = runtime.engine.backend.notice  # llama.cpp's kernels off, or the model on torch
        notices = [
            n
            for n in self.notices + runtime.notices + notes + ([server_problem] if server_problem else [])
            if n != backend_notice
        ]
        self.notices = []  # the settings file's notices are shown once
        if notices:
            self.window.statusBar().showMessage(" · ".join(notices), 20000)
        if backend_notice:  # too long, and too important, for a passing status message
            box = QMessageBox(QMessageBox.Icon.Warning, "Draftscope", backend_notice, parent=self.window)
            box.setObjectName("backendNotice")
            box.open()
            self.backend_box = box
        self.window_ready.emit(self.window)

    def _remember_model(self) -> None:
        """The model just loaded heads the switcher's recent models (kept in the settings file)."""
        model = self.settings.model
        recent = ([model] + [m for m in self.settings.recent_models if m != model])[:MAX_RECENT]
        self.settings.recent_models = recent  # in place: the runtime holds these settings too
        self._save_quietly(self.settings)  # once the model has opened: the file never names a model that failed

    def _keep_window(self, window) -> None:
        """The window's shape (gui/window_memory.py) remembered in the settings and saved, in the
        running model's settings while another model is tried (the file never names a model that failed)."""
        if window is not self.window:
            return  # a window a reload replaced, closing
        kept = self.running_settings or self.settings
        for settings in {id(kept): kept, id(self.settings): self.settings}.values():
            window_memory.remember(window, settings)
        self._save_quietly(kept)

    def _keep_tool_settings(self) -> None:
        """A tool allowed for good ("Always for this tool") changed the window's settings: kept in the file."""
        self.settings.mcp_servers = self.window.settings.mcp_servers
        self._save_quietly(self.settings)

    def _save_quietly(self, settings) -> None:
        try:
            save_settings(settings, self.settings_file)
        except OSError:
            pass  # remembered for this session; the settings file is said to fail when settings are saved

    def _on_failed(self, message: str, error: BaseException | None = None) -> None:
        self.loading = False
        self.stages.end()
        self.progress.hide()
        if self.running_settings is not None:
            self._switch_failed(message, error)
            return
        box = QMessageBox(
            QMessageBox.Icon.Critical,
            "Draftscope",
            f"{self.settings.model} could not be loaded:\n\n{message}\n\nChoose another model, or "
            "retry (for the default model's first download: the network; or the disk space). The "
            f"model is kept in the settings file, {self.settings_file or paths.settings_file()}.",
        )
        box.setObjectName("loadErrorDialog")
        choose = box.addButton("Choose another model…", QMessageBox.ButtonRole.ActionRole)
        choose.setObjectName("chooseAnotherModel")
        retry = box.addButton("Retry", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Quit", QMessageBox.ButtonRole.RejectRole)
        actions = {retry: self._retry, choose: self.choose_model, **install_action(box, error, self._retry)}
        box.buttonClicked.connect(lambda b: actions.get(b, QApplication.quit)())
        self.error_box = box
        box.open()

    def _switch_failed(self, message: str, error: BaseException | None = None) -> None:
        """A model switch that failed leaves the running model, the window and the settings file as
        they were; the message (over the window: it waits for an answer) offers Retry, Choose another
        model and Keep the current one."""
        kept = self.running_settings.model
        box = QMessageBox(
            QMessageBox.Icon.Critical,
            "Draftscope",
            f"{self.settings.model} could not be loaded:\n\n{message}\n\n{kept} is still running, and "
            "the settings file still names it.",
            parent=self.window,
        )
        box.setObjectName("switchErrorDialog")
        choose = box.addButton("Choose another model…", QMessageBox.ButtonRole.ActionRole)
        choose.setObjectName("chooseAnotherModel")
        retry = box.addButton("Retry", QMessageBox.ButtonRole.AcceptRole)
        keep = box.addButton(f"Keep {Path(kept).name}", QMessageBox.ButtonRole.RejectRole)
        keep.setObjectName("keepCurrentModel")
        actions = {retry: self._retry, choose: self.open_settings, **install_action(box, error, self._retry)}
        box.buttonClicked.connect(lambda b: actions.get(b, self._keep_current)())
        self.error_box = box
        box.open()

    def _keep_current(self) -> None:
        """Back to the model that runs: its settings are the ones the next change starts from."""
        if self.running_settings is not None:
            self.loader_thread.shutdown()  # the failed switch's loader, kept for a Retry no longer wanted
            self.loader_thread = None
            tried, self.settings, self.running_settings = self.settings, self.running_settings, None
            if change_between(tried, self.settings) & Change.LOOK:
                self._apply_look(tried, self.settings)

    def _apply_look(self, _old, settings) -> None:
        theme = apply_theme(QApplication.instance(), settings.theme, settings.font_size)
        self.window.set_code_style(code_style(theme), dark=theme == "dark")

    def choose_model(self) -> None:
        """The first-run model chooser again (after a model failed to open): the model chosen there is
        saved and loaded; closed without a choice, the load error comes back."""
        self.chooser = FirstRunDialog(dataclasses.replace(self.settings), settings_file=self.settings_file)
        self.chooser.setObjectName("chooseModelDialog")

        def chosen(result: int) -> None:
            if result != QDialog.DialogCode.Accepted:
                self.error_box.open()
                return
            self.settings = self.chooser.settings
            self._retry()

        self.chooser.finished.connect(chosen)
        self.chooser.open()

    def _retry(self) -> None:
        self.loading = True
        self.stages.begin(f"Loading {self.settings.model} …")
        show_over(self.progress, self.window)  # a reload's progress over the window, not under it
        QMetaObject.invokeMethod(self.loader, "load", Qt.ConnectionType.QueuedConnection)

    # ------------------------------------------------------------------ settings

    def open_settings(self) -> None:
        if self.window is None or self.window.streaming:
            if self.window is not None:
                self.window.statusBar().showMessage("Settings can be changed once the answer is done", 5000)
            return
        self.settings_dialog = SettingsDialog(
            self.settings,
            self.window,
            learned=self.window.runtime.learned_text(),
            recurrent=head_description(self.settings.model),
        )
        self.settings_dialog.generation.threads.show_choice(self.window.runtime.engine.threads_choice)
        self.settings_dialog.accepted.connect(lambda: self.apply_settings(self.settings_dialog.result_settings()))
        tab = self.settings_dialog.server
        tab.show_requests(self.server.requests)
        self.server.requested.connect(tab.add_request)  # queued: from the server's thread
        self.settings_dialog.finished.connect(lambda _: self.server.requested.disconnect(tab.add_request))
        self.settings_dialog.open()

    def apply_settings(self, new) -> None:
        """Save and apply: what the change asks for is decided by the runtime (Runtime.change_for)
        and heard as events (core/settings_change.py): a restyle, the model loaded again (the window
        comes back on the same conversation), the server restarted, the drafters rebuilt."""
        if self.loading:  # another model is being opened: its result decides what runs
            self.window.statusBar().showMessage("Settings can be changed once the model has loaded", 5000)
            return
        self._keep_current()  # a change made after a failed switch starts from the model that runs
        old, change = self.settings, self.window.runtime.change_for(new)
        if not change & Change.MODEL:
            change = self._take(new, change)
        self.changes.announce(change, old, new)

    def _take(self, new, change):
        """Settings the running model takes as it is: saved, and given to the runtime. A datastore
        that cannot be opened is said, and the old drafters kept (no drafters change then)."""
        self.settings = new
        try:
            save_settings(new, self.settings_file)
        except OSError as exc:
            QMessageBox.warning(
                self.window, "Draftscope", f"The settings could not be saved: {exc}\n\nThey apply to this session only."
            )
        runtime = self.window.runtime
        try:
            runtime.apply(new)
        except Exception as exc:  # a datastore that cannot be opened: say so, keep the old drafters
            runtime.apply(
                dataclasses.replace(new, datastore=runtime.settings.datastore, drafters=runtime.settings.drafters)
            )
            QMessageBox.warning(self.window, "Draftscope", f"The datastore could not be opened: {exc}")
            return change & ~Change.DRAFTERS
        return change

    def _load_with(self, old, new) -> None:
        """The model loaded again for ``new``; ``old`` runs until it has (saved once it opened)."""
        self.running_settings, self.settings = old, new
        self.reload()

    def _server_changed(self, _old, _new) -> None:
        problem = self._apply_server()
        if problem:
            self.window.statusBar().showMessage(problem, 15000)

    def _drafters_changed(self, _old, _new) -> None:
        self.window.drafters_changed()
        notes = self.window.runtime.drafter_setup.notes
        if notes:
            self.window.statusBar().showMessage(" · ".join(notes), 15000)

    def _apply_server(self) -> str | None:
        """Start, restart or stop the local server as the settings say; a problem as text."""
        problem = self.server.apply(self.window, self.settings)
        self.window.show_server(self.server.url)
        return problem

    def use_datastore(self, path: str) -> None:
        """A datastore built in the wizard becomes the one drafts come from (retrieval on)."""
        drafters = dict(self.settings.drafters, retrieval=True)
        self.apply_settings(dataclasses.replace(self.settings, datastore=path, drafters=drafters))
        if self.window is not None:
            self.window.statusBar().showMessage(f"Drafting from {Path(path).name} from now on", 8000)

    def reload(self) -> None:
        """Load the model again with the current settings (off the UI thread), then swap windows."""
        self._new_loader()
        self._retry()


def _let_go(previous, runtime) -> None:
    """The window a reload replaced closed and deleted (Qt's connections to its lambdas kept it alive for good),
    its model freed now, what they leave unfrozen (the loader froze all) and collected once the window is gone."""
    old = previous.runtime
    previous.close()
    if old.engine is not runtime.engine:  # a factory may hand the same engine back (tests)
        old.unload()
    gc.unfreeze()
    previous.destroyed.connect(lambda: QTimer.singleShot(0, freeze_loaded_objects))
    previous.deleteLater()


def _has_display() -> bool:
    if sys.platform != "linux" or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main(*, model: str | None = None, quit_after_ms: int | None = None, screenshot: str | None = None) -> int:
    """Run the app. ``quit_after_ms`` (``draftscope gui --quit-after``) is a smoke test for bundles:
    quit that long after the main window shows, exit 1 if the model fails to load. With it,
    ``screenshot`` (``--screenshot PATH``) saves the window as the screen shows it (PNG) before quitting."""
    problem = _display_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    app = _application()
    settings, notices = _starting_settings(app, model, ask=quit_after_ms is None)
    if settings is None:  # the first-run dialog was closed
        return 0
    # the plain speed is measured once the window is open: the loading screen waits only for what answers need
    launcher = Launcher(functools.partial(load_runtime, baseline=False), HistoryStore(), settings, notices)
    if quit_after_ms is not None:
        quit_after(launcher, quit_after_ms, screenshot)
    launcher.start()
    return app.exec()


def _display_problem() -> str | None:
    """Why no window can open here (no display, missing X11 libraries: said rather than Qt's abort)."""
    if not _has_display():
        return (
            "draftscope: no display found (DISPLAY/WAYLAND_DISPLAY unset). Run `draftscope chat` for the "
            "terminal chat, or set QT_QPA_PLATFORM."
        )
    return xcb_problem()


def _application() -> QApplication:
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Draftscope")
    app.setDesktopFileName("io.github.draftscope.Draftscope")  # Wayland matches the desktop entry by it
    app.setWindowIcon(app_icon())
    return app


def _starting_settings(app, model: str | None, *, ask: bool):
    """(settings, notices) to start with: the file's, the ``model`` given, or on the first run the
    model chosen in the first-run dialog when ``ask`` (None when it was closed without a choice)."""
    settings, notices = load_settings()
    apply_theme(app, settings.theme, settings.font_size)
    if model:
        settings.model = model
    elif needs_first_run() and ask:  # a smoke test never waits for a person
        dialog = FirstRunDialog(settings)
        dialog.setWindowIcon(app.windowIcon())
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None, notices
        settings = dialog.settings
    return settings, notices


def _drafter_notes(runtime) -> list[str]:
    """The runtime's drafter notes, once its drafters could be set up: a datastore that cannot be
    opened turns retrieval off; anything else that fails turns drafting off (the model still
    answers, plainly), and the note names what failed."""
    try:
        return list(runtime.drafter_setup.notes)
    except Exception as exc:  # a datastore that cannot be opened: answer without it
        first = exc
    settings = runtime.settings
    runtime.settings = dataclasses.replace(settings, drafters=dict(settings.drafters, retrieval=False))
    try:
        return [f"Retrieval drafts are off: the datastore could not be opened: {first}", *runtime.drafter_setup.notes]
    except Exception as exc:  # not the datastore: answer plainly, saying why
        runtime.settings = dataclasses.replace(settings, drafters={name: False for name in settings.drafters})
        return [f"Drafting is off: the drafters could not be set up: {exc}"]
