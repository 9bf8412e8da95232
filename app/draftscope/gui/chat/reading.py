"""While a message is read (the prompt's prefill, before the first token), the transcript says so:
"reading your message · N of M tokens" over a progress bar, at the foot of the transcript where the
answer will appear. A long message on a CPU takes many seconds to read; a bare cursor looks stuck."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar

SHOW_AFTER_MS = 300  # a short message is read before this: no flash of the indicator
MARGIN = 8


class ReadingIndicator(QFrame):
    """Shows the ReadingEvents of ``signals`` (a SessionSignals) over ``transcript``'s viewport."""

    def __init__(self, transcript, signals) -> None:
        super().__init__(transcript.viewport())
        self.setObjectName("readingIndicator")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.label = QLabel(objectName="readingLabel")
        self.bar = QProgressBar(objectName="readingProgress", textVisible=False)
        self.bar.setMaximumHeight(10)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.label)
        layout.addWidget(self.bar, 1)
        self.hide()
        self.reading = False  # an answer's prompt is being read (the indicator shows, or soon will)
        self.timer = QTimer(self, singleShot=True, interval=SHOW_AFTER_MS)
        self.timer.timeout.connect(self._show)
        transcript.viewport().installEventFilter(self)  # follows the transcript's size
        signals.reading.connect(self.show_reading)
        for done in (signals.answer_started, signals.steps, signals.answer_ended, signals.answer_failed):
            done.connect(self.done)

    def show_reading(self, event) -> None:
        self.label.setText(f"reading your message · {event.read:,} of {event.total:,} tokens")
        self.bar.setRange(0, max(1, event.total))
        self.bar.setValue(event.read)
        if not self.reading:
            self.reading = True
            self.timer.start()

    def done(self, *_args) -> None:
        """The first token came (or the answer ended): the answer itself shows from here."""
        self.reading = False
        self.timer.stop()
        self.hide()

    def _show(self) -> None:
        if self.reading:
            self._place()
            self.show()
            self.raise_()

    def _place(self) -> None:
        area = self.parentWidget().rect()
        height = self.sizeHint().height()
        self.setGeometry(MARGIN, area.height() - height - MARGIN, area.width() - 2 * MARGIN, height)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and self.isVisible():
            self._place()
        return False
