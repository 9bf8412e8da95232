"""The window's status bar: which model runs where, what it drafts from, its plain speed, the
local server's address and the live tokens per second."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QStatusBar

from draftscope.gui.form_widgets import ElidedLabel

KEPT = 280  # pixels the model's name and how it runs keep before anything else gives way
GIVES_WAY = 24  # pixels the least important names (datastore, drafters, learned answers) shrink to


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


class StatusLine:
    """The labels of a QStatusBar, each set in words by one method."""

    def __init__(self, bar: QStatusBar, engine) -> None:
        self.bar = bar
        # names give way (ending in "…") before the figures when the window is narrow
        # what runs keeps its words; the datastore, the drafters and the learned answers give way first
        self.model = ElidedLabel(engine.name, objectName="statusModel", shortest=KEPT)
        self.model.setToolTip(f"The model: {engine.name}")
        backend = engine.backend
        self.device = ElidedLabel(backend.brief(), objectName="statusDevice", shortest=KEPT)
        self.device.setToolTip(_device_tip(engine))
        self.datastore = ElidedLabel(objectName="statusDatastore", shortest=GIVES_WAY)
        self.drafters = ElidedLabel(objectName="statusDrafters", shortest=GIVES_WAY)
        self.rate = QLabel("– tokens/s", objectName="statusTokensPerSecond")
        self.rate.setToolTip(
            "This answer's decode rate (tokens/s after its first token, as plain decoding's "
            "figure beside it is measured) and τ, the tokens each step wrote"
        )
        self.baseline = QLabel(objectName="statusBaseline")
        self.baseline.setToolTip(
            "Plain decoding speed of this model on this device (measured in the "
            "background once the window opens, and again when older than 10 minutes)"
        )
        self.learned = ElidedLabel(objectName="statusLearned", shortest=GIVES_WAY)
        for label in (self.model, self.device, self.datastore, self.drafters, self.learned, self.baseline):
            bar.addWidget(label)
        self.server = ElidedLabel(objectName="statusServer", shortest=KEPT // 2)  # the address first
        self.server.hide()
        bar.addPermanentWidget(self.server)
        bar.addPermanentWidget(self.rate)

    def say(self, text: str, ms: int = 5000) -> None:
        """A passing message (it hides the labels on the left for ``ms``)."""
        self.bar.showMessage(text, ms)

    def show_datastore(self, label: str) -> None:
        # the file's name (a full path crowds out the rest), the path on hover
        self.datastore.setText(f"datastore: {Path(label).name if label != 'none' else label}")
        self.datastore.setToolTip(
            label
            if label != "none"
            else "No datastore: drafts come from the conversation (and the draft model, if one is set)"
        )

    def show_drafters(self, names: list[str]) -> None:
        self.drafters.setText(f"drafts: {', '.join(names) or 'none'}")
        self.drafters.setToolTip(
            f"Drafts for the next answer come from: {', '.join(names) or 'nothing (plain decoding)'}"
            " (Settings ▸ Drafting)"
        )

    def show_rate(self, tokens_per_second: float, tau: float) -> None:
        self.rate.setText(f"{tokens_per_second:.1f} tokens/s · τ {tau:.2f}")

    def show_baseline(self, rate: float | None, *, measuring: bool = False) -> None:
        self.baseline.setText(
            "plain: measuring …" if measuring else f"plain: {rate:.1f} tokens/s" if rate else "plain: not measured"
        )

    def show_measuring(self, stage) -> None:
        """How far the plain-speed measurement is (it runs in the background, behind the window)."""
        if stage.fraction is not None and stage.fraction < 1:
            self.baseline.setText(f"plain: measuring · {stage.fraction:.0%}")

    def show_learned(self, brief: str, full: str = "") -> None:
        self.learned.setVisible(bool(brief))
        self.learned.setText(brief)
        self.learned.setToolTip(
            f"{(full or brief)[:1].upper()}{(full or brief)[1:]}. Drafts also come from this "
            "model's own past answers, which grow as you chat (indexed in the background). "
            "Settings ▸ Drafting turns it off; File ▸ Forget the learned answers clears them."
        )

    def show_server(self, url: str | None, sharing=None) -> None:
        """``sharing``: the model's stepper when it holds several answers (stepping together), whose answers per
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

    def refresh_server(self) -> None:
        if getattr(self, "_url", None) is None:
            return
        text = f"server: {self._url.removeprefix('http://')}"
        if self._sharing is not None and self._sharing.forwards:
            text += f" · {self._sharing.mean_answers:.1f} answers a forward"
        if self.server.text() != text:
            self.server.setText(text)
