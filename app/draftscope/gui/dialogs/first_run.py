"""First-run setup, shown when there is no settings file yet: choose a model (a catalogue model,
with its size, memory and use, one recommended for this computer, is downloaded here with progress
and cancel, its draft model too if ticked), then optionally build the model's default datastore.

``FirstRunDialog(settings).exec()`` is Accepted once the settings are saved (``dialog.settings``
holds them), Rejected when the user closes it (nothing is saved; the launcher quits).
The download (``ModelDownload``) and the build each run as a job off the UI thread (``JobRunner``),
one at a time; the model fetcher and the datastore builder can be injected (tests). The launcher
opens it again to choose another model when one fails to open. The first page, the model's
choices, is ``ModelPage`` (model_page.py)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from draftscope.core.settings_checks import read_model
from draftscope.core.words import describe_error, setting_name
from draftscope.core.words import eta_text as _eta
from draftscope.datastore.default import build_default_datastore, default_datastore_path
from draftscope.datastore.progress import Progress
from draftscope.gui.dialogs.model_download import ModelDownload
from draftscope.gui.dialogs.model_page import ModelPage
from draftscope.gui.fit_screen import fit_dialog, grow_to, scrolling
from draftscope.gui.form_widgets import (
    note as _note,
)
from draftscope.gui.form_widgets import (
    progress_row as _progress_row,
)
from draftscope.gui.form_widgets import (
    show_error,
)
from draftscope.gui.form_widgets import (
    wrapping_label as _wrapping_label,
)
from draftscope.gui.jobs import PROGRESS_STEPS as _STEPS
from draftscope.gui.jobs import JobRunner, TransferRate
from draftscope.models import assets, catalog
from draftscope.models.resolve import ModelNotFoundError
from draftscope.retrieval import BuildCancelled
from draftscope.storage import Settings, save_settings, settings_path


def needs_first_run(path: Path | str | None = None) -> bool:
    """True when there is no settings file yet (``path``: the settings file, default the user's)."""
    return not Path(path or settings_path()).exists()


class FirstRunDialog(QDialog):
    """Two pages: choose a model (page 0), the default chat datastore (page 1)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        fetch_model=catalog.fetch_model,
        build_datastore=build_default_datastore,
        settings_file: Path | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings = settings or Settings()
        self._build = build_datastore
        self._settings_file = settings_file
        self._retry = None  # what Retry repeats
        self.download = ModelDownload(self, fetch_model=fetch_model, resume_with="Continue")
        self.download.ended.connect(self._download_ended)
        self.download.status_grew.connect(self._fit_height)  # a second line: grow rather than squeeze the page
        self.build_job = JobRunner(
            self,
            on_progress=self._show_build_progress,
            on_status=self._show_build_status,
            on_done=self._on_built,
            on_failed=self._on_build_failed,
        )
        self._build_rate = TransferRate()  # the ShareGPT download, the build's first phase
        self._datastore_built = False
        self._datastore_folder: Path | None = None
        self.setObjectName("firstRunDialog")
        self.setWindowTitle("Set up Draftscope")
        self.setMinimumWidth(640)

        self._build_heading()
        self.pages = QStackedWidget(objectName="setupPages")
        self.pages.addWidget(self._model_page())
        self.pages.addWidget(self._datastore_page())
        error_row = self._build_error_row()
        self._lay_out(error_row, self._build_buttons())
        self._clear_error()
        self._show_page(0)
        fit_dialog(self)

    # --- building the dialog -------------------------------------------------------------------

    def _build_heading(self) -> None:
        """ "Step 1 of 2" over the page's title, in a larger bold font."""
        self.step_label = QLabel(objectName="setupStep")
        self.title = QLabel(objectName="setupTitle")
        font = QFont(self.title.font())
        font.setPointSizeF(font.pointSizeF() * 1.4)
        font.setBold(True)
        self.title.setFont(font)

    def _build_error_row(self) -> QHBoxLayout:
        """What went wrong, with Retry beside it when trying again can help."""
        self.error_label = _wrapping_label(objectName="setupError")
        show_error(self.error_label)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.retry_button = QPushButton("Retry", objectName="retryButton")
        self.retry_button.clicked.connect(self._on_retry)
        error_row = QHBoxLayout()
        error_row.addWidget(self.error_label, 1)
        error_row.addWidget(self.retry_button, 0, Qt.AlignmentFlag.AlignTop)
        return error_row

    def _build_buttons(self) -> QHBoxLayout:
        """Quit at the left; Back, Continue, Skip and Finish at the right (_sync shows the page's)."""
        self.quit_button = QPushButton("Quit", objectName="quitSetupButton")
        self.quit_button.setToolTip("Close Draftscope without saving any settings")
        self.quit_button.clicked.connect(self.reject)
        self.back_button = QPushButton("Back", objectName="backButton")
        self.back_button.clicked.connect(lambda: self._show_page(0))
        self.continue_button = QPushButton("Continue", objectName="continueButton")
        self.continue_button.clicked.connect(self._on_continue)
        self.skip_button = QPushButton("Skip for now", objectName="skipDatastoreButton")
        self.skip_button.clicked.connect(self._finish)
        self.finish_button = QPushButton("Finish", objectName="finishButton")
        self.finish_button.clicked.connect(self._finish)
        buttons = QHBoxLayout()
        buttons.addWidget(self.quit_button)
        buttons.addStretch(1)
        for b in (self.back_button, self.continue_button, self.skip_button, self.finish_button):
            buttons.addWidget(b)
            b.setAutoDefault(False)
        return buttons

    def _lay_out(self, error_row: QHBoxLayout, buttons: QHBoxLayout) -> None:
        layout = QVBoxLayout(self)
        layout.addWidget(self.step_label)
        layout.addWidget(self.title)
        layout.addSpacing(4)
        layout.addWidget(scrolling(self.pages, "setupPagesScroll"), 1)  # a short screen scrolls the page
        layout.addLayout(error_row)
        layout.addSpacing(8)
        layout.addLayout(buttons)

    # --- page 0: the model ---------------------------------------------------------------------

    def _model_page(self) -> QWidget:
        self.model_page = ModelPage(self.settings, self.download)
        # the page's choices as the dialog's own, for scripts/screenshots.py and the tests
        self.catalog_radios, self.local_radio, self.local_path = (
            self.model_page.catalog_radios,
            self.model_page.local_radio,
            self.model_page.local_path,
        )
        self._dtype, self._backend = self.model_page.dtype, self.model_page.backend
        return self.model_page

    def _on_continue(self) -> None:
        self._clear_error()
        self.download.show_status("")
        model = self.model_page.chosen_catalog_model()
        if model is not None:  # fetch what is missing of the model and its wanted draft model, one at a time
            missing = [m for m in (model, self.model_page.draft_offer.wanted()) if m is not None and not m.fetched]
            if missing:
                self._start_fetch(missing[0])
            else:
                self.download.show_status(f"{model.title} is already downloaded.")
                self._model_chosen(setting_name(model))
            return
        found = self.model_page.chosen_found_model()
        if found is not None:
            spec = found if self._readable(found) else None  # an LM Studio / Ollama file may be cut short too
        else:
            spec = self._check_local() if self.model_page.local_radio.isChecked() else self._check_hub()
        if spec is not None:
            self._model_chosen(spec)

    def _check_local(self) -> str | None:
        """The chosen path if it holds a model, else None with the reason shown."""
        text = self.model_page.local_path.text().strip()
        if not text:
            return self._invalid("Enter the path of a model folder or a .gguf file, or use Browse…")
        path = Path(text).expanduser()
        if not path.exists():
            return self._invalid(f"{path} does not exist. Choose a model folder (with config.json) or a .gguf file.")
        # tokenizer files alone satisfy resolve_model, but a model folder cannot load without config.json
        if path.is_dir() and not (path / "config.json").is_file() and not any(path.glob("*.gguf")):
            return self._invalid(
                f"{path} has no config.json, so it is not a Hugging Face model folder. Choose a "
                "folder with config.json and the weights, or a .gguf file."
            )
        return str(path.resolve()) if self._readable(str(path)) else None

    def _check_hub(self) -> str | None:
        spec = self.model_page.hub_id.text().strip()
        if not spec:
            return self._invalid("Enter a Hugging Face hub id such as HuggingFaceTB/SmolLM2-360M-Instruct.")
        return spec if self._readable(spec) else None

    def _readable(self, spec: str) -> bool:
        """Whether ``spec`` reads as a model (typed, browsed to, picked from LM Studio's or Ollama's
        list, a folder's one GGUF); if not, the reason is shown."""
        try:
            read_model(spec)
        except (ModelNotFoundError, OSError) as exc:
            self._invalid(describe_error(exc))
            return False
        return True

    def _invalid(self, message: str) -> None:
        self._show_error(message, retry=None)  # None, for the checks' returns

    def _start_fetch(self, model: catalog.CatalogModel) -> None:
        if self._busy() or not self.download.start(model):
            return
        self._clear_error()
        self._sync()

    def _download_ended(self, outcome: str) -> None:
        self._sync()
        model = self.download.model
        if outcome == "done":
            self.model_page.refresh_catalog_notes()
            self.download.show_status(f"{model.title} is ready.")
            self._on_continue()  # the draft model next, if wanted; else on to the datastore
        elif outcome == "failed":
            self._show_error(
                f"The model could not be downloaded.\n{self.download.why_failed()}",
                retry=lambda: self._start_fetch(model),
            )

    def _model_chosen(self, spec: str) -> None:
        self.settings.model = spec
        self.model_page.draft_offer.apply(self.settings)
        self._update_datastore_page()
        self._show_page(1)

    # --- page 1: the datastore -----------------------------------------------------------------

    def _datastore_page(self) -> QWidget:
        page = QWidget(objectName="datastorePage")
        self.datastore_intro = _wrapping_label(
            "Draftscope answers faster by guessing a few words ahead and letting the model check them all in one step. "
            "Good guesses come from retrieval: continuations looked up in a datastore of earlier text. A datastore "
            "built from real chats (ShareGPT) helps most in everyday conversation; for a code model, the Python "
            "standard library's sources are added.",
            objectName="datastoreIntro",
        )
        later = _note(
            "Without one, drafts come only from the conversation itself. You can build datastores from your "
            "own files later: File ▸ Build a datastore…"
        )
        self.build_button = QPushButton(objectName="buildDatastoreButton")
        self.build_button.clicked.connect(self._start_build)
        self.datastore_note = _note("")
        self.datastore_note.setObjectName("datastoreNote")
        self.datastore_progress = QProgressBar(objectName="datastoreProgress")
        self.cancel_build_button = QPushButton("Cancel", objectName="cancelBuildButton")
        self.cancel_build_button.clicked.connect(self._cancel_build)
        self.build_row = _progress_row(self.datastore_progress, self.cancel_build_button)
        self.datastore_status = _wrapping_label(objectName="datastoreStatus")

        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.datastore_intro)
        layout.addWidget(later)
        layout.addSpacing(10)
        layout.addWidget(self.build_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.datastore_note)
        layout.addSpacing(8)
        layout.addWidget(self.build_row)
        layout.addWidget(self.datastore_status)
        layout.addStretch(1)
        return page

    def _update_datastore_page(self) -> None:
        model = catalog.find(self.settings.model)
        self.build_button.setText(
            "Build the default datastore (~27 MB download, "
            f"{'a minute or two' if model is not None and model.code else 'about a minute'})"
        )
        existing = default_datastore_path(self.settings.model)
        if model is None:
            note = (
                "The default datastore is built here for catalogue models only. Build one for the model you chose "
                "later from your own files: File ▸ Build a datastore…"
            )
        elif existing.is_file() and not self._datastore_built:
            note = f"A default datastore for {model.title} already exists ({existing}); Draftscope will use it."
        else:
            sources = "ShareGPT chats and the Python standard library's sources" if model.code else "ShareGPT chats"
            note = f"{sources}, tokenised for {model.title}."
        self.datastore_note.setText(note)
        self.datastore_note.setVisible(bool(note))

    def _start_build(self) -> None:
        build, model = self._build, self.settings.model
        out = default_datastore_path(model)

        def job(report, status, cancel):
            result = build(out, model=model, progress=report, cancel=cancel, on_status=status)
            return Path(getattr(result, "path", None) or out)

        if self._busy() or not self.build_job.start(job):
            return
        self._datastore_folder = out.parent
        self._build_rate.restart()
        self._clear_error()
        self.datastore_progress.setRange(0, 0)  # indeterminate until sizes are known
        self.datastore_status.setText("Starting …")
        self._sync()

    def _cancel_build(self) -> None:
        if self.build_job.cancel():
            self.datastore_status.setText("Cancelling …")
            self._sync()

    def _finish(self) -> None:
        self._clear_error()
        try:
            save_settings(self.settings, self._settings_file)
        except OSError as exc:
            folder = Path(self._settings_file or settings_path()).parent
            self._show_error(f"The settings could not be saved.\n{describe_error(exc, folder)}", retry=self._finish)
            return
        self.accept()

    # --- the build's reports and outcome ------------------------------------------------------

    def _on_retry(self) -> None:
        retry = self._retry
        self._clear_error()
        if retry is not None:
            retry()

    def _show_build_status(self, text: str) -> None:
        text = text.strip().replace("...", "…")
        self.datastore_status.setText(text[:1].upper() + text[1:])

    def _show_build_progress(self, p: Progress) -> None:
        bar, label = self.datastore_progress, self.datastore_status
        if p.phase == "downloading":
            label.setText(self._build_rate.show(bar, "Downloading ShareGPT", p.bytes_read, p.bytes_total))
            return
        if p.phase == "reading":
            fraction = p.fraction
            if fraction is None:
                bar.setRange(0, 0)
            else:
                bar.setRange(0, _STEPS)
                bar.setValue(int(_STEPS * fraction))
            model = catalog.find(self.settings.model)
            what = "Reading conversations and code" if model is not None and model.code else "Reading conversations"
            parts = [what, f"{p.tokens:,} tokens", f"{p.tokens_per_second / 1e3:,.0f}k tokens/s"]
            if p.eta_seconds is not None:
                parts.append(_eta(p.eta_seconds))
            label.setText(" · ".join(parts))
        elif p.phase == "indexing":
            bar.setRange(0, 0)
            label.setText(f"Indexing {p.tokens:,} tokens (sorting suffixes) …")
        else:
            bar.setRange(0, _STEPS)
            bar.setValue(_STEPS)

    def _on_built(self, result: Path) -> None:
        self._sync()
        if self.build_job.cancelled:  # finished before it saw the cancel: treat as cancelled all the same
            self.datastore_status.setText("Build cancelled; nothing was written.")
            return
        # the model's default datastore stays implicit, so a later model switch picks its own
        self.settings.datastore = "" if Path(result) == default_datastore_path(self.settings.model) else str(result)
        self._datastore_built = True
        self.datastore_progress.setRange(0, _STEPS)
        self.datastore_progress.setValue(_STEPS)
        self.datastore_status.setText(f"The datastore is ready: {result}")
        self._update_datastore_page()
        self._sync()
        self.finish_button.setFocus()

    def _on_build_failed(self, exc: Exception) -> None:
        self._sync()
        if self.build_job.cancelled or isinstance(exc, (assets.FetchCancelled, BuildCancelled)):
            self.datastore_status.setText("Build cancelled; nothing was written.")
            return
        self.datastore_status.clear()
        self._show_error(
            f"The datastore could not be built.\n{describe_error(exc, self._datastore_folder)}", retry=self._start_build
        )

    # --- state and looks -----------------------------------------------------------------------

    def _busy(self) -> bool:
        """A download or a build runs: one job at a time, and the pages wait."""
        return self.download.running or self.build_job.running

    def _show_page(self, index: int) -> None:
        if self._busy():
            return
        self._clear_error()
        self.pages.setCurrentIndex(index)
        self.step_label.setText(f"Step {index + 1} of 2")
        self.title.setText(("Choose a model", "Retrieval datastore")[index])
        self._sync()

    def _sync(self) -> None:
        """Enable and show what fits the page and whether a job runs (the download's own bar and
        Cancel follow it)."""
        page, busy, building = self.pages.currentIndex(), self._busy(), self.build_job.running
        self.model_page.set_choosable(not busy)
        self.build_row.setVisible(building)
        self.cancel_build_button.setEnabled(building and not self.build_job.cancelled)
        self.continue_button.setVisible(page == 0)
        self.continue_button.setEnabled(not busy)
        self.back_button.setVisible(page == 1)
        self.back_button.setEnabled(not busy)
        self.skip_button.setVisible(page == 1 and not self._datastore_built)
        self.skip_button.setEnabled(not busy)
        self.finish_button.setVisible(page == 1)
        self.finish_button.setEnabled(not busy and self._datastore_built)
        if page == 1:
            self.build_button.setEnabled(
                not busy and catalog.find(self.settings.model) is not None and not self._datastore_built
            )
        default = self.continue_button if page == 0 else (self.finish_button if self._datastore_built else None)
        for b in (self.continue_button, self.finish_button):
            b.setDefault(b is default)

    def _show_error(self, message: str, *, retry) -> None:
        self._retry = retry
        self.error_label.setText(message)
        self.error_label.show()
        self.retry_button.setVisible(retry is not None)
        self._fit_height()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fit_height()

    def _fit_height(self) -> None:
        """Grow to fit new text (wrapped labels would otherwise be squeezed over each other)."""
        self.layout().activate()
        grow_to(self, self.heightForWidth(self.width()))  # no taller than the screen: the page scrolls

    def _clear_error(self) -> None:
        self.error_label.clear()
        self.error_label.hide()
        self.retry_button.hide()

    # --- closing -------------------------------------------------------------------------------

    def reject(self) -> None:
        # stop a download or build first: the worker removes its partial files as it stops
        self.download.cancel()
        self.build_job.cancel()
        super().reject()

    def done(self, result: int) -> None:
        super().done(result)
        self.download.close()
        self.build_job.close()
