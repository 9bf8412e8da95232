"""The layout cost of appending tokens to one long paragraph where every few tokens change format
(the chat with drafted tokens coloured, an answer without line breaks): Qt lays out a paragraph
as a whole, so each append costs in proportion to the paragraph.

    QT_QPA_PLATFORM=offscreen python scripts/bench_token_layout.py
"""

import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QApplication, QTextBrowser

TOKENS, UPDATES, PER_UPDATE = 2500, 5, 25


def append_tokens(cursor: QTextCursor, start: int, count: int, *, links: bool, per_step: bool) -> None:
    for i in range(start, start + count):
        fmt = QTextCharFormat()
        if links:
            fmt.setAnchor(True)
            fmt.setAnchorHref(f"step:live/{i // 3 if per_step else 0}")
        if i % 3 == 0:  # a drafted token every third, coloured by its source
            fmt.setBackground(QColor("#cfe3ff"))
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(f" tok{i}", fmt)


def main() -> None:
    app = QApplication([])
    for links, per_step in ((False, False), (True, False), (True, True)):
        view = QTextBrowser()
        view.resize(700, 800)
        view.show()
        cursor = QTextCursor(view.document())
        append_tokens(cursor, 0, TOKENS, links=links, per_step=per_step)
        app.processEvents()
        started = time.perf_counter()
        for k in range(UPDATES):
            append_tokens(cursor, TOKENS + k * PER_UPDATE, PER_UPDATE, links=links, per_step=per_step)
            bar = view.verticalScrollBar()
            bar.setValue(bar.maximum())
            app.processEvents()
        ms = (time.perf_counter() - started) * 1000 / UPDATES
        print(
            f"links {links!s:5} one link per step {per_step!s:5}: {ms:6.1f} ms per update of {PER_UPDATE} tokens "
            f"after {TOKENS}"
        )


if __name__ == "__main__":
    main()
