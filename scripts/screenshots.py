"""Render the main window with real answers to docs/screenshots/, in the light and the dark
theme (offscreen Qt).

    QT_QPA_PLATFORM=offscreen python scripts/screenshots.py [--model default]
"""

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from draftscope.engine.drafters import ContextDrafter  # noqa: E402
from draftscope.engine.engine import Engine  # noqa: E402
from draftscope.gui.main_window import MainWindow  # noqa: E402
from draftscope.gui.theme import app_icon, apply_theme, code_style  # noqa: E402
from draftscope.storage import HistoryStore, Settings  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="default")
parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "screenshots"))
args = parser.parse_args()

app = QApplication([])
app.setWindowIcon(app_icon())
apply_theme(app, "light", 10)
engine = Engine.load(args.model)
window = MainWindow(engine, HistoryStore(Path(tempfile.mkdtemp()) / "h.sqlite3"), Settings(max_new_tokens=120),
                    drafters=lambda: [ContextDrafter()], datastore_label="(none)", code_style=code_style("light"))
window.show()
for question in ("What is speculative decoding? Answer in two sentences.", "Give me a Python function that reverses a string."):
    loop = QEventLoop()
    window.worker.finished.connect(loop.quit)
    window.chat_input.setPlainText(question)
    window.send()
    loop.exec()
    window.worker.finished.disconnect(loop.quit)
QTimer.singleShot(200, app.quit)
app.exec()
Path(args.out).mkdir(parents=True, exist_ok=True)
for theme in ("light", "dark"):
    apply_theme(app, theme, 10)
    window.set_code_style(code_style(theme), dark=theme == "dark")
    QTimer.singleShot(200, app.quit)
    app.exec()
    path = Path(args.out) / ("main-window.png" if theme == "light" else "main-window-dark.png")
    window.grab().save(str(path))
    print(path)
