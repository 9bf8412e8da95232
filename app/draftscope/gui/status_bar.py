"""The window's status bar, in the order of what matters: the answer's speed (the one tokens/s and τ),
a hint while the computer is busy, plain decoding's speed, what drafting does (or why it is off), the
model and how it runs; then the datastore, the learned answers and the local server.

No item is cut mid-word: one whose text is very long is shortened once, at ITEM_PX, with its whole
text on hover, and when the window is too narrow for every item, the least important are hidden
(from the end of the order) rather than squeezed."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QLabel, QStatusBar

from draftscope.core.words import BUSY_NOW, note_head, rate_text
from draftscope.gui.form_widgets import ElidedLabel

ITEM_PX = 360  # the widest one item is shown (its whole text on hover)
RATE_TEMPLATE = "888.8 tokens/s · τ 8.88"  # the rate's room, so items do not jump as its figures change
ROOM_SLACK = 28  # pixels the bar keeps for its size grip and margins
ITEM_GAP = 8  # pixels between two items (the layout's spacing and the items' frames)


def _device_tip(engine) -> str:
    """What runs where, in full: the backend's describe() (its layers on a card and the memory they
    took, where it has some), the device and the precision, and the settings that change them."""
    backend = engine.backend
    on_card = getattr(backend, "offload", None) is not None
    settings = "Backend, Precision and GPU layers" if on_card else "Backend and Precision"
    return (
        f"{backend.describe()}: {backend.kind} runs the model on {engine.device}, in {engine.precision}"
        + (f": {engine.dtype_reason}" if engine.dtype_reason else "")
        + f". Settings ▸ Model ▸ {settings} change it."
    )


class _Refit(QObject):
    """Fits the items again when the bar is resized."""

    def __init__(self, line: StatusLine) -> None:
        super().__init__(line.bar)
        self.line = line

    def eventFilter(self, watched, event) -> bool:  # Qt's name
        if event.type() == QEvent.Type.Resize:
            self.line.fit()
        return False


class StatusLine:
    """The labels of a QStatusBar, each set in words by one method, shown in ``order`` as far as the
    bar has room."""

    def __init__(self, bar: QStatusBar, engine) -> None:
        self.bar = bar
        self.rate = QLabel("– tokens/s", objectName="statusTokensPerSecond")
        self.rate.setToolTip(
            "This answer's writing rate (tokens/s after its first token, as plain decoding's figure "
            "is measured; the first token's wait is on the answer's line) and τ, the tokens each step wrote"
        )
        self.busy = QLabel(BUSY_NOW, objectName="statusBusy")
        self.busy.setToolTip(
            "Plain decoding steps ran at less than half the speed measured on this machine: another "
            "program is using the processor. Answers are slower until it is done."
        )
        self.baseline = QLabel(objectName="statusBaseline")
        self.baseline.setToolTip(
            "Plain decoding speed of this model on this device at this conversation's length (measured "
            "in the background, and from the plain steps of every answer)"
        )
        self.drafters = ElidedLabel(objectName="statusDrafters")
        self.model = ElidedLabel(objectName="statusModel")
        self.device = ElidedLabel(objectName="statusDevice")
        self.datastore = ElidedLabel(objectName="statusDatastore")
        self.learned = ElidedLabel(objectName="statusLearned")
        self.server = ElidedLabel(objectName="statusServer")
        self.order = [
            *(self.rate, self.busy, self.baseline, self.drafters, self.model, self.device),
            *(self.datastore, self.learned, self.server),
        ]
        self.wanted = {label: True for label in self.order}  # what has something to say (fit shows what fits)
        self.wanted.update({self.busy: False, self.learned: False, self.server: False})
        for label in self.order:
            bar.addWidget(label)
        self._names: list[str] = []
        self._note: str | None = None
        self._set(self.model, engine.name, f"The model: {engine.name}")
        self._set(self.device, engine.backend.brief(), _device_tip(engine))
        bar.installEventFilter(_Refit(self))
        bar.messageChanged.connect(lambda _text: self.fit())

    # ------------------------------------------------------------------ fitting

    def _set(self, label: QLabel, text: str, tip: str | None = None) -> None:
        """``text`` shortened to ITEM_PX at most (the whole of it then leads the tooltip), then a refit."""
        shown = label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, ITEM_PX)
        label.setText(shown)
        if tip is not None or shown != text:
            label.setToolTip(tip if shown == text else f"{text}\n{tip or ''}".strip())
        self.fit()

    def _want(self, label: QLabel, wanted: bool) -> None:
        self.wanted[label] = wanted
        self.fit()

    def fit(self) -> None:
        """Show the items in order while each fits whole; hide the rest (a passing message has the
        left of the bar meanwhile: fitted again when it goes)."""
        if self.bar.currentMessage():
            return
        self.rate.setMinimumWidth(self.rate.fontMetrics().horizontalAdvance(RATE_TEMPLATE) + 4)  # the font may change
        room = self.bar.width() - ROOM_SLACK
        for label in self.order:
            need = max(label.sizeHint().width(), label.minimumWidth()) + ITEM_GAP
            show = self.wanted[label] and need <= room
            if self.wanted[label]:
                room = room - need if show else -1  # once one does not fit, none after it shows
            if label.isVisibleTo(self.bar) != show:
                label.setVisible(show)

    def shown(self) -> list[QLabel]:
        """The items shown now, in order (tests)."""
        return [label for label in self.order if label.isVisibleTo(self.bar)]

    # ------------------------------------------------------------------ what each item says

    def say(self, text: str, ms: int = 5000) -> None:
        """A passing message (it hides the labels for ``ms``)."""
        self.bar.showMessage(text, ms)

    def show_datastore(self, label: str) -> None:
        # the file's name (a full path crowds out the rest), the path on hover
        tip = (
            label
            if label != "none"
            else "No datastore: drafts come from the conversation (and the draft model, if one is set)"
        )
        self._set(self.datastore, f"datastore: {Path(label).name if label != 'none' else label}", tip)

    def show_drafters(self, names: list[str]) -> None:
        self._names = list(names)
        self._show_drafting()

    def show_drafting(self, note: str | None) -> None:
        """Why drafting is off (the policy's note, engine/events.py), or None while it runs."""
        if note != self._note:
            self._note = note
            self._show_drafting()

    def _show_drafting(self) -> None:
        names = ", ".join(self._names)
        tip = f"Drafts for the next answer come from: {names or 'nothing (plain decoding)'} (Settings ▸ Drafting)"
        if self._note and self._names:
            self._set(self.drafters, note_head(self._note), f"{self._note[:1].upper()}{self._note[1:]}.\n{tip}")
        else:
            self._set(self.drafters, f"drafts: {names or 'none'}", tip)

    def show_rate(self, tokens_per_second: float | None, tau: float) -> None:
        """The one tokens/s (the writing rate; None before an answer's second step) and τ."""
        self.rate.setText(f"{rate_text(tokens_per_second)} · τ {tau:.2f}")

    def show_step(self, event) -> None:
        """An answer's latest StepEvent: its rate, plain decoding's at its context, the busy hint,
        why drafting is off."""
        self.show_rate(event.decode_tokens_per_second, event.tau)
        if event.plain_tokens_per_second:
            self.show_baseline(event.plain_tokens_per_second)
        if self.wanted[self.busy] != event.busy:
            self._want(self.busy, event.busy)
        self.show_drafting(event.drafting)

    def show_baseline(self, rate: float | None, *, measuring: bool = False) -> None:
        text = "plain: measuring …" if measuring else f"plain: {rate:.1f} tokens/s" if rate else "plain: not measured"
        if text != self.baseline.text():
            self._set(self.baseline, text)

    def show_measuring(self, stage) -> None:
        """How far the plain-speed measurement is (it runs in the background, behind the window)."""
        if stage.fraction is not None and stage.fraction < 1:
            self._set(self.baseline, f"plain: measuring · {stage.fraction:.0%}")

    def show_learned(self, brief: str, full: str = "") -> None:
        whole = full or brief
        self._set(
            self.learned,
            brief,
            f"{whole[:1].upper()}{whole[1:]}. Drafts also come from this "
            "model's own past answers, which grow as you chat (indexed in the background). "
            "Settings ▸ Drafting turns it off; File ▸ Forget the learned answers clears them.",
        )
        self._want(self.learned, bool(brief))

    def show_server(self, url: str | None, sharing=None) -> None:
        """``sharing``: the model's stepper when it holds several answers (stepping together), whose answers per
        forward are shown beside the address, read again every 2 s while the server runs."""
        self._url, self._sharing = url, sharing
        if getattr(self, "_timer", None) is None:
            self._timer = QTimer(self.bar, interval=2000)
            self._timer.timeout.connect(self.refresh_server)
        if url is None:
            self._timer.stop()
        else:
            self._timer.start()
            self.server.setToolTip(
                f"OpenAI-compatible server: base URL {url}"
                + (
                    "; answers at once share forwards: the figure is how many a forward "
                    "held on average since the model was loaded"
                    if sharing is not None
                    else ""
                )
            )
            self.refresh_server()
        self._want(self.server, url is not None)

    def refresh_server(self) -> None:
        if getattr(self, "_url", None) is None:
            return
        text = f"server: {self._url.removeprefix('http://')}"
        if self._sharing is not None and self._sharing.forwards:
            text += f" · {self._sharing.mean_answers:.1f} answers a forward"
        if self.server.text() != text:
            self.server.setText(text)
            self.fit()
