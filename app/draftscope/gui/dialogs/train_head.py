"""Train the recurrent drafter: a head for the loaded model, trained here (File ▸ Train the
recurrent drafter…).

The training data is the ShareGPT corpus (fetched the first time) or a file the user picks (a chat
log, or distilled answers: the model's own text). Training runs :func:`train_head` on a worker
thread (the dialogs' one ``JobRunner``), with progress, speed, time left, loss
and the latest validation τ. Cancel keeps a checkpoint, and a later Start with the same data and
token budget resumes from it. Closing the dialog while training cancels and closes once the
checkpoint is saved. When a head is written, ``head_trained(path)`` is emitted. The form's
widgets and choices: ``train_head_form``; opening it from the window (PyTorch offered first where
it is missing) and the head in words: ``recurrent_head``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QWidget

from draftscope.core.words import describe_error
from draftscope.core.words import eta_text as _eta
from draftscope.drafters.recurrent.files import default_head_path
from draftscope.drafters.recurrent.head_drafter import target_for
from draftscope.drafters.recurrent.train import (
    TrainCancelled,
    TrainError,
    TrainOptions,
    TrainProgress,
    TrainReport,
    checkpoint_path,
    train_head,
)
from draftscope.gui.dialogs.recurrent_head import head_description, head_training
from draftscope.gui.dialogs.train_head_form import TrainHeadForm
from draftscope.gui.fit_screen import grow_to
from draftscope.gui.jobs import JobRunner
from draftscope.models import assets


class TrainHeadDialog(TrainHeadForm, QDialog):
    """``TrainHeadDialog(engine, model_spec)``: the engine's model (torch, or a GGUF on llama.cpp),
    tokenizer and name are trained on; the head goes to ``out`` (default: the app's head for ``model_spec``).
    ``options_overrides`` are TrainOptions fields (tests: tiny sizes); ``trainer`` has
    :func:`train_head`'s signature."""

    head_trained = Signal(str)

    def __init__(
        self,
        engine,
        model_spec: str,
        *,
        out: Path | None = None,
        options_overrides: dict | None = None,
        trainer: Callable = train_head,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.engine, self.model_spec = engine, model_spec
        self.out = Path(out) if out is not None else default_head_path(model_spec)
        self._overrides = dict(options_overrides or {})
        self._trainer = trainer
        self.job = JobRunner(
            self,
            on_progress=self._show_progress,
            on_status=self._show_status,
            on_done=self._on_trained,
            on_failed=self._on_failed,
        )
        self._close_when_done = False
        self._report: TrainReport | None = None
        training = head_training(model_spec) or {}
        self._rate: float | None = training.get("tokens_per_second")  # measured: by the last head's run, or live

        self.setObjectName("trainHeadDialog")
        self.setWindowTitle("Train the recurrent drafter")
        self.setMinimumWidth(600)
        intro = self._build_intro()
        self.choices = self._build_choices()
        self.progress_row = self._build_progress_row()
        self._build_messages()
        self._lay_out(intro, self._build_buttons())

        self.progress_row.hide()
        self._on_data_changed()
        self._update_estimate()
        self._show_idle()

    # --- states --------------------------------------------------------------------------------

    def _show_idle(self) -> None:
        described = head_description(self.model_spec)
        self.existing.setText(
            f"This model has a head ({described}); training again replaces it."
            if described
            else "This model has no recurrent head yet."
        )
        self.choices.setEnabled(True)
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        if self.has_checkpoint():
            self.start_button.setText("Resume")
            self.start_button.setToolTip("Continue the cancelled run from its checkpoint (the same data and tokens)")
        else:
            self.start_button.setText("Start" if self._report is None else "Train again")
            self.start_button.setToolTip("")

    def has_checkpoint(self) -> bool:
        return checkpoint_path(self.out).exists()

    def is_training(self) -> bool:
        return self.job.running

    def report(self) -> TrainReport | None:
        return self._report

    # --- training ------------------------------------------------------------------------------

    def start(self) -> None:
        if self.job.running:
            return
        spec = self.data_spec()
        if spec is not None and not self.path_edit.text().strip():
            self._show_error("Choose the file to train on (Browse…).")
            return
        if not self.job.start(self._job(spec)):
            return  # the dialog is closing
        self._report = None
        self.choices.setEnabled(False)
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setRange(0, 0)
        self.progress_row.show()
        self.status.setText("Starting …")
        self.summary.clear()
        self.summary.hide()
        self.error.clear()
        self.error.hide()

    def _job(self, spec: str | None) -> Callable:
        engine, tokenizer, name = self.engine, self.engine.tokenizer, self.engine.name
        out, trainer, fields = self.out, self._trainer, self.option_fields()

        def job(report, status, cancel):
            model = target_for(engine)  # the torch model, or the GGUF read through llama.cpp
            data = spec
            if data is None:
                status("Fetching the ShareGPT corpus (the first time only) …")
                data = f"chat:{assets.fetch(assets.SHAREGPT_JSON, quiet=True, cancel=cancel)}"
            options = TrainOptions(data=[data], **fields)
            out.parent.mkdir(parents=True, exist_ok=True)
            ckpt = checkpoint_path(out)

            def train(resume: bool) -> TrainReport:
                status("Reading and tokenising the training data …")
                return trainer(
                    model,
                    tokenizer,
                    options,
                    out,
                    model_name=name,
                    resume=resume,
                    progress=report,
                    cancel=cancel,
                    log=lambda line: status(line[:1].upper() + line[1:]),
                )

            if not ckpt.exists():
                return train(False)
            try:
                return train(True)
            except TrainError as exc:
                if str(ckpt) not in str(exc):  # a problem with the data, not with the checkpoint
                    raise
            # the kept checkpoint is of other choices (data, tokens) or unreadable: this Start starts over
            return train(False)

        return job

    def cancel(self) -> None:
        if self.job.cancel():
            self.cancel_button.setEnabled(False)
            self.status.setText("Cancelling … (saving a checkpoint)")

    def _show_status(self, text: str) -> None:
        self.status.setText(text)
        self._fit()  # a status line may have grown to two lines

    def _job_ended(self, *, show_bar: bool) -> bool:
        """Back to idle after a run; False when the dialog closes instead (closed while training)."""
        if self._close_when_done:
            super().reject()
            return False
        self.cancel_button.setEnabled(False)
        # the bar stays where the run got to (full when done); a failed run leaves nothing to show
        self.progress_row.setVisible(show_bar)
        if self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
        return True

    def _show_progress(self, p: TrainProgress) -> None:
        if p.phase == "reading":
            self.progress.setRange(0, 0)
            return
        self.progress.setRange(0, p.steps)
        self.progress.setValue(p.step)
        if p.tokens_per_second > 0 and p.step > 0:
            self._rate = p.tokens_per_second
        parts = [f"Step {p.step:,} of {p.steps:,}", f"{p.tokens:,} tokens", f"{p.tokens_per_second:,.0f} tokens/s"]
        if p.eta_seconds is not None and p.phase != "done":
            parts.append(_eta(p.eta_seconds) or "less than a second left")
        if p.loss is not None:
            parts.append(f"loss {p.loss:.3f}")
        if p.validation:
            parts.append(f"validation τ {p.validation['tau_chain']:.2f}")
        if p.phase == "validating":
            parts.append("validating …")
        self.status.setText(" · ".join(parts))
        self._fit()

    def _on_trained(self, report: TrainReport) -> None:
        if not self._job_ended(show_bar=True):
            return
        self._report = report
        self._rate = report.tokens_per_second or self._rate
        self._update_estimate()
        v = report.validation or {}
        took = f"{report.seconds / 60:.1f} minutes" if report.seconds >= 60 else f"{report.seconds:.0f} seconds"
        lines = [f"Trained on {report.tokens:,} tokens in {took} ({report.tokens_per_second:,.0f} tokens/s)."]
        if v:
            lines.append(
                f"Validation: τ {v['tau_chain']:.2f} (tokens per step of a greedy chain of drafts); "
                f"top-1 by depth {', '.join(f'{x:.2f}' for x in v['top1_by_depth'])}."
            )
        lines.append(
            f"Saved as {report.out}. The recurrent drafter drafts with it from the next answer on "
            "(Settings ▸ Drafting switches it off and on)."
        )
        self.status.setText("Done.")
        self.summary.setText("\n".join(lines))
        self.summary.show()
        self.head_trained.emit(str(report.out))
        self._show_idle()
        self._fit()

    def _on_failed(self, exc: BaseException) -> None:
        cancelled = self.job.cancelled or isinstance(exc, (TrainCancelled, assets.FetchCancelled))
        if not self._job_ended(show_bar=cancelled):
            return
        if cancelled:
            kept = self.has_checkpoint()
            self.status.setText(
                "Training cancelled. "
                + (
                    "The checkpoint is kept: Resume continues from it (with the same data and tokens), now or after "
                    "reopening this window."
                    if kept
                    else "Nothing was trained yet."
                )
            )
        else:
            self.status.setText("")
            if isinstance(exc, TrainError):
                self._show_error(f"The head could not be trained: {exc}")
            else:
                self._show_error(f"The head could not be trained.\n{describe_error(exc, self.out.parent)}")
        self._show_idle()
        self._fit()

    def _show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.show()
        self._fit()

    def _fit(self) -> None:
        """Grow to the height the wrapped texts now need at this width (Qt would squeeze them)."""
        layout = self.layout()
        layout.activate()
        need = layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth() else self.sizeHint().height()
        grow_to(self, need)  # no taller than the screen

    # --- closing -------------------------------------------------------------------------------

    def reject(self) -> None:
        """Close; while training, cancel first and close once the checkpoint is saved."""
        if self.job.running:
            self._close_when_done = True
            self.cancel()
            self.status.setText("Cancelling … the window closes once the checkpoint is saved.")
            return
        super().reject()

    def done(self, result: int) -> None:
        super().done(result)
        self.job.close()
