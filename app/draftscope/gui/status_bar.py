"""The window's status bar: which model runs where, what it drafts from, its plain speed, the
local server's address and the live tokens per second."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel, QStatusBar


class StatusLine:
    """The labels of a QStatusBar, each set in words by one method."""

    def __init__(self, bar: QStatusBar, engine) -> None:
        self.bar = bar
        # short words: the status bar squeezes (and cuts) labels once they outgrow the window
        self.model = QLabel(engine.name, objectName="statusModel")
        self.model.setToolTip(f"The model: {engine.name}")
        backend = engine.backend
        self.device = QLabel(backend.describe(), objectName="statusDevice")
        self.device.setToolTip(f"{backend.kind} runs the model on {engine.device}, in {engine.precision}"
                               + (f": {engine.dtype_reason}" if engine.dtype_reason else "")
                               + ". Settings ▸ Model ▸ Backend and Precision change it.")
        self.datastore = QLabel(objectName="statusDatastore")
        self.drafters = QLabel(objectName="statusDrafters")
        self.rate = QLabel("– tokens/s", objectName="statusTokensPerSecond")
        self.baseline = QLabel(objectName="statusBaseline")
        self.baseline.setToolTip("Plain decoding speed of this model on this device (measured at load, "
                                 "and again when older than 10 minutes)")
        self.learned = QLabel(objectName="statusLearned")
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
        self.datastore.setText(f"datastore: {Path(label).name if label != 'none' else label}")
        self.datastore.setToolTip(label if label != "none" else "No datastore: drafts come from the "
                                  "conversation (and the draft model, if one is set)")

    def show_drafters(self, names: list[str]) -> None:
        self.drafters.setText(f"drafts: {', '.join(names) or 'none'}")
        self.drafters.setToolTip("Where drafts come from for the next answer (Settings ▸ Drafting)")

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

    def show_server(self, url: str | None) -> None:
        self.server.setVisible(url is not None)
        if url is not None:
            self.server.setText(f"server: {url.removeprefix('http://')}")
            self.server.setToolTip(f"OpenAI-compatible server: base URL {url}")
