"""The window's status bar: which model runs where, what it drafts from, its plain speed, the
local server's address and the live tokens per second."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QStatusBar

SHORTEST = 48  # pixels a name may shrink to before the status bar cuts it off
KEPT = 280  # pixels the model's name and how it runs keep before anything else gives way


class ElidedLabel(QLabel):
    """A one-line label that, given less room than its text needs, ends it with "…" (its whole
    text on hover) instead of being cut mid-letter; it gives way before the labels beside it that
    hold figures. ``shortest``: the width it shrinks to at most (KEPT: what runs, which the other
    names give way to)."""

    def __init__(self, *args, shortest: int = SHORTEST, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.shortest = shortest

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(self.shortest, hint.width()), hint.height())

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        room = self.contentsRect().width()
        if self.fontMetrics().horizontalAdvance(self.text()) <= room:
            super().paintEvent(event)
            return
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, room)
        painter.drawText(self.contentsRect(), int(self.alignment()), shown)

    def shown_text(self) -> str:
        """The text as drawn now (elided when the label is narrower than its text)."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())


class StatusLine:
    """The labels of a QStatusBar, each set in words by one method."""

    def __init__(self, bar: QStatusBar, engine) -> None:
        self.bar = bar
        # names give way (ending in "…") before the figures when the window is narrow
        # what runs keeps its words; the datastore, the drafters and the learned answers give way first
        self.model = ElidedLabel(engine.name, objectName="statusModel", shortest=KEPT)
        self.model.setToolTip(f"The model: {engine.name}")
        backend = engine.backend
        self.device = ElidedLabel(backend.describe(), objectName="statusDevice", shortest=KEPT)
        self.device.setToolTip(f"{backend.describe()}: {backend.kind} runs the model on {engine.device}, "
                               f"in {engine.precision}" + (f": {engine.dtype_reason}" if engine.dtype_reason else "")
                               + ". Settings ▸ Model ▸ Backend and Precision change it.")
        self.datastore = ElidedLabel(objectName="statusDatastore")
        self.drafters = ElidedLabel(objectName="statusDrafters")
        self.rate = QLabel("– tokens/s", objectName="statusTokensPerSecond")
        self.baseline = QLabel(objectName="statusBaseline")
        self.baseline.setToolTip("Plain decoding speed of this model on this device (measured at load, "
                                 "and again when older than 10 minutes)")
        self.learned = ElidedLabel(objectName="statusLearned")
        for label in (self.model, self.device, self.datastore, self.drafters, self.learned, self.baseline):
            bar.addWidget(label)
        self.server = QLabel(objectName="statusServer")
        self.server.hide()
        bar.addPermanentWidget(self.server)
        bar.addPermanentWidget(self.rate)

    def say(self, text: str, ms: int = 5000) -> None:
        """A passing message (it hides the labels on the left for ``ms``)."""
        self.bar.showMessage(text, ms)

    def show_datastore(self, label: str) -> None:
        # the file's name (a full path crowds out the rest), the path on hover
        self.datastore.setText(f"datastore: {Path(label).name.removesuffix('.idx') if label != 'none' else label}")
        self.datastore.setToolTip(label if label != "none" else "No datastore: drafts come from the "
                                  "conversation (and the draft model, if one is set)")

    def show_drafters(self, names: list[str]) -> None:
        self.drafters.setText(f"drafts: {', '.join(names) or 'none'}")
        self.drafters.setToolTip(f"Drafts for the next answer come from: {', '.join(names) or 'nothing (plain decoding)'}"
                                 " (Settings ▸ Drafting)")

    def show_rate(self, tokens_per_second: float, tau: float) -> None:
        self.rate.setText(f"{tokens_per_second:.1f} tokens/s · τ {tau:.2f}")

    def show_baseline(self, rate: float | None, *, measuring: bool = False) -> None:
        self.baseline.setText("plain: measuring …" if measuring else
                              f"plain: {rate:.1f} tokens/s" if rate else "plain: not measured")

    def show_learned(self, brief: str, full: str = "") -> None:
        self.learned.setVisible(bool(brief))
        self.learned.setText(brief)
        self.learned.setToolTip(f"{(full or brief)[:1].upper()}{(full or brief)[1:]}. Drafts also come from this "
                                "model's own past answers, which grow as you chat (indexed in the background). "
                                "Settings ▸ Drafting turns it off; File ▸ Forget the learned answers clears them.")

    def show_server(self, url: str | None, sharing=None) -> None:
        """``sharing``: the model's SharedForward (answers stepping together), whose answers per
        forward are shown beside the address, read again every 2 s while the server runs."""
        self.server.setVisible(url is not None)
        self._url, self._sharing = url, sharing
        if getattr(self, "_timer", None) is None:
            self._timer = QTimer(self.bar, interval=2000)
            self._timer.timeout.connect(self.refresh_server)
        if url is None:
            self._timer.stop()
        else:
            self._timer.start()
        if url is not None:
            self.server.setToolTip(f"OpenAI-compatible server: base URL {url}"
                                   + ("; answers at once share forwards: the figure is how many a forward "
                                      "held on average since the model was loaded" if sharing is not None else ""))
            self.refresh_server()

    def refresh_server(self) -> None:
        if getattr(self, "_url", None) is None:
            return
        text = f"server: {self._url.removeprefix('http://')}"
        if self._sharing is not None and self._sharing.forwards:
            text += f" · {self._sharing.mean_answers:.1f} answers a forward"
        if self.server.text() != text:
            self.server.setText(text)
