"""A catalogue model's download in a dialog, as the first-run and the settings dialogs show it: a
progress bar with Cancel, a status line under it (bytes, rate and time left, with which part or
the joining on a second line; "Cancelling …"; how it ended) and the job that runs
``catalog.fetch_model`` off the UI thread.

The dialog lays out ``bar_row`` and ``status``, calls ``start(model)``, hears ``ended`` and calls
``close()`` from its ``done()``. A cancelled download keeps the parts fetched so far, so starting
it again resumes. ``DownloadBox``: the settings dialog's box under a model choice, around one."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QVBoxLayout, QWidget

from draftscope.core.words import describe_error, part_status, sentence, size_text
from draftscope.gui.form_widgets import FitsWidth, FittedLabel, hint, progress_row, show_error
from draftscope.gui.jobs import JobRunner, TransferRate
from draftscope.gui.model_switcher import model_arrivals
from draftscope.models import assets, catalog


class ModelDownload(QObject):
    """One catalogue model's download at a time. ``prefix`` names the widgets: "" gives
    ``fetchProgress``, ``fetchStatus`` and ``cancelFetchButton``; "model" gives ``modelFetchProgress``,
    ``modelFetchStatus`` and ``cancelModelFetchButton``. ``resume_with`` is the button that resumes
    a cancelled download ("Continue", "Download"). ``steady_height``: the hidden bar keeps its room,
    so a page does not jump when a download starts (a form row rather closes up)."""

    ended = Signal(str)  # "done", "cancelled" or "failed" (``why_failed()`` says why; the dialog shows it)
    status_grew = Signal()  # the status line needs more height than it has (a second line)

    def __init__(
        self,
        parent: QWidget,
        *,
        fetch_model=catalog.fetch_model,
        prefix: str = "",
        resume_with: str,
        steady_height: bool = True,
    ) -> None:
        super().__init__(parent)
        self._fetch_model, self._resume_with = fetch_model, resume_with
        self.job = JobRunner(
            self,
            on_progress=self._show_bytes,
            on_status=self._show_phase,
            on_done=self._on_done,
            on_failed=self._on_failed,
        )
        self.model: catalog.CatalogModel | None = None  # the model downloading, or last downloaded
        self.error: Exception | None = None  # why the last download failed
        self._rate = TransferRate()
        self._line = self._phase = ""  # bytes, rate and time left; the fetcher's last word (which part, joining)

        def name(what: str) -> str:
            return prefix + what if prefix else what[:1].lower() + what[1:]

        self.progress = QProgressBar(objectName=name("FetchProgress"))
        self.cancel_button = QPushButton("Cancel", objectName=f"cancel{prefix[:1].upper()}{prefix[1:]}FetchButton")
        self.cancel_button.clicked.connect(self.cancel)
        self.bar_row = progress_row(self.progress, self.cancel_button)
        if not steady_height:
            policy = self.bar_row.sizePolicy()
            policy.setRetainSizeWhenHidden(False)
            self.bar_row.setSizePolicy(policy)
        self.status = FittedLabel(objectName=name("FetchStatus"))
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bar_row.hide()
        self.status.hide()

    @property
    def running(self) -> bool:
        return self.job.running

    def start(self, model: catalog.CatalogModel) -> bool:
        """Download ``model``; False (nothing starts) while a download runs or after ``close``."""
        fetch_model = self._fetch_model

        def job(report, status, cancel):
            path = fetch_model(
                model, progress=lambda done, total: report((done, total)), cancel=cancel, on_status=status
            )
            if not model.fetched:  # the fetcher returned, yet the file is not where the catalogue says
                raise FileNotFoundError(f"the download ended, but {model.path} is missing")
            return path

        if not self.job.start(job):
            return False
        self.model, self.error = model, None
        self._rate.restart()
        self._line, self._phase = f"Downloading {model.title} …", ""
        self.show_status(self._line)
        self.progress.setRange(0, 0)  # indeterminate until the size is known
        self.cancel_button.setEnabled(True)
        self.bar_row.show()
        return True

    def cancel(self) -> bool:
        """Stop the download (the parts fetched so far are kept); True when one was running."""
        if not self.job.cancel():
            return False
        self.cancel_button.setEnabled(False)
        self.show_status("Cancelling …")
        return True

    def close(self) -> None:
        """The dialog is closing: stop the download and end its thread; nothing is heard after."""
        self.job.close()

    def show_status(self, text: str, *, error: bool = False) -> None:
        """Put ``text`` on the status line (hidden while empty)."""
        show_error(self.status, bool(error))
        self.status.setText(text)
        self.status.setVisible(bool(text))
        if text and self.status.heightForWidth(self.status.width()) > self.status.height():
            self.status_grew.emit()

    def why_failed(self) -> str:
        """The last failure in words a user can act on (the folder named, for a full disk)."""
        return describe_error(self.error, self.model.path.parent if self.model is not None else None)

    # --- the job's reports, on the UI thread ---------------------------------------------------

    def _show_bytes(self, value: tuple[int, int]) -> None:
        done, total = value
        self._line = self._rate.show(self.progress, f"Downloading {self.model.title}", done, total)
        self._show_lines()

    def _show_phase(self, text: str) -> None:
        text = text.strip().replace("...", "…")
        text = text[:1].upper() + text[1:]
        if len(self.model.parts) == 1 and text.startswith("Downloading part"):
            return  # "part 1 of 1" says nothing
        self._phase = part_status(text)
        self._show_lines()

    def _show_lines(self) -> None:
        self.show_status("\n".join(t for t in (self._line, self._phase) if t))

    def _on_done(self, _path) -> None:
        # finished, even if Cancel was pressed at the last moment: the file is there, and says so
        self._end("done")

    def _on_failed(self, exc: Exception) -> None:
        self.error = exc
        self._end("cancelled" if self.job.cancelled or isinstance(exc, assets.FetchCancelled) else "failed")

    def _end(self, outcome: str) -> None:
        self.bar_row.hide()
        if outcome == "done":
            self.show_status(f"{self.model.title} is downloaded.")
            model_arrivals().arrived.emit()  # the model switcher offers it now
        elif outcome == "cancelled":
            kept = (
                f" The parts downloaded so far are kept: {self._resume_with} resumes it."
                if len(self.model.parts) > 1
                else ""
            )
            self.show_status("Download cancelled." + kept)
        else:
            self.show_status("")  # the dialog says why, where it shows errors
        self.ended.emit(outcome)


class DownloadBox(FitsWidth, QWidget):
    """Under a model choice: what the chosen catalogue model is good for and whether it is on disk,
    a Download button, and while it downloads a progress bar, Cancel and the bytes, rate and time
    left. ``prefix`` names the widgets (``modelState``, ``downloadModelButton``, ``modelFetchProgress``, ...)."""

    def __init__(self, prefix: str, fetch_model) -> None:
        super().__init__(objectName=f"{prefix}Download")
        self.state = hint("", wrap=True, objectName=f"{prefix}State")
        self.download_button = QPushButton("Download", objectName=f"download{prefix[:1].upper()}{prefix[1:]}Button")
        self.download = ModelDownload(
            self, fetch_model=fetch_model, prefix=prefix, resume_with="Download", steady_height=False
        )
        self.model: catalog.CatalogModel | None = None
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.state, 1)
        top.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.download.bar_row)
        layout.addWidget(self.download.status)

    def show_model(
        self,
        model: catalog.CatalogModel | None,
        *,
        other: str = "",
        busy: bool = False,
        offered_for: catalog.CatalogModel | None = None,
    ) -> None:
        """Describe ``model`` (None: ``other`` as the text, no download); ``offered_for``: ``model``
        is not chosen but offered as the draft model of that one (Download chooses it too)."""
        if model is not self.model:
            self.download.show_status("")  # how another model's download ended
        self.model = model
        if model is None:
            self.state.setText(other)
            self.state.setVisible(bool(other))
            self.download_button.hide()
            return
        self.state.show()
        what = sentence(model.good_for)
        if model.fetched:
            self.state.setText(f"{what} Downloaded.")
            self.download_button.hide()
        else:
            if offered_for is not None:
                what = (
                    f"{model.title} can draft for {offered_for.title}: answers come faster where its guesses "
                    "hold, with the same text. Download fetches it and drafts with it."
                )
            self.state.setText(f"{what}\nNot downloaded yet ({size_text(model.size)}).")
            self.download_button.show()
            self.download_button.setEnabled(not busy)
