"""Render the desktop app with real answers to docs/screenshots/ (offscreen Qt): the main window
in the light and the dark theme with the inspection panels, each panel on its own, the chat with
drafted tokens coloured, and the pages of the datastore wizard building from real files.

    QT_QPA_PLATFORM=offscreen python scripts/screenshots.py [--model qwen2.5-coder-1.5b] [--only window|wizard]

The model runs as the app runs it (the runtime from Settings: a GGUF on llama.cpp); drafts come
from the default chat datastore when it was built (`draftscope datastore build-default`), the
conversation and, as in a first session, nothing learned yet.
"""

import argparse
import json
import os
import sysconfig
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEventLoop, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QProgressBar, QWizard  # noqa: E402

from draftscope.datastore.learned import LearnedStore  # noqa: E402
from draftscope.gui.main_window import MainWindow  # noqa: E402
from draftscope.runtime import load_runtime  # noqa: E402
from draftscope.gui.theme import app_icon, apply_theme, code_style  # noqa: E402
from draftscope.storage import HistoryStore, Settings  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="qwen2.5-coder-1.5b")
parser.add_argument("--max-new-tokens", type=int, default=200)
parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "screenshots"))
parser.add_argument("--only", choices=("window", "wizard"))
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

app = QApplication([])
app.setWindowIcon(app_icon())
apply_theme(app, "light", 10)
runtime = load_runtime(Settings(model=args.model, max_new_tokens=args.max_new_tokens))
engine = runtime.engine
# As a first session: nothing learned yet (the app learns each answer as it is given).
runtime.learned = LearnedStore("screenshots", engine.vocab, Path(tempfile.mkdtemp()))


def settle(ms: int = 200) -> None:
    """Let Qt lay out and paint. A local loop: quitting the application's would close every window."""
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def wait_until(condition, timeout_ms: int = 120_000) -> None:
    loop = QEventLoop()
    timer = QTimer(interval=50)
    timer.timeout.connect(lambda: loop.quit() if condition() else None)
    timer.start()
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    timer.stop()


def save(widget, name: str) -> None:
    path = out / name
    widget.grab().save(str(path))
    print(path)


def window_shots() -> None:
    window = MainWindow(runtime, HistoryStore(Path(tempfile.mkdtemp()) / "h.sqlite3"), code_style=code_style("light"))
    window.resize(1500, 940)
    window.show()
    window.show_panels()
    window.resizeDocks([window.docks["trieDock"], window.docks["speedupDock"]], [520, 340], Qt.Orientation.Vertical)
    window.resizeDocks([window.docks["trieDock"]], [620], Qt.Orientation.Horizontal)
    # a code question, then an edit of the code: where drafts from the conversation pay most
    for question in ("Write a short Python function that checks whether a string is a palindrome.",
                     "Add type hints and a one-line docstring to that function."):
        window.chat_input.setPlainText(question)
        window.send()
        wait_until(lambda: not window.streaming)
    settle()
    # a step with a drafted run, to show a real tree with an accepted path
    steps = window.inspection.steps
    best = max(range(len(steps)), key=lambda i: (steps[i].accepted, steps[i].proposed))
    window.provenance_action.setChecked(True)
    window.inspection.select(best)
    settle()
    for theme in ("light", "dark"):
        apply_theme(app, theme, 10)
        window.set_code_style(code_style(theme), dark=theme == "dark")
        window.inspection.select(best)
        settle()
        save(window, "main-window.png" if theme == "light" else "main-window-dark.png")
    apply_theme(app, "light", 10)
    window.set_code_style(code_style("light"), dark=False)
    window.inspection.select(best)
    settle()
    save(window.chat_view, "provenance.png")
    for name, dock in window.docks.items():
        dock.setFloating(True)
        dock.resize(900, 560 if name != "draftsDock" else 420)
        settle()
        save(dock.widget(), {"draftsDock": "drafts-panel.png", "trieDock": "trie-view.png",
                             "speedupDock": "speedup-panel.png"}[name])
    window.close()


def wizard_shots() -> None:
    from draftscope.gui.datastore_wizard import DatastoreWizard

    os.environ["DRAFTSCOPE_DATA_DIR"] = tempfile.mkdtemp()  # the built index goes to a scratch folder
    folder = Path(tempfile.mkdtemp())
    chats = folder / "support-chats.json"
    chats.write_text(json.dumps([{"conversations": [
        {"from": "human", "value": f"How do I reset my password on device {i}?"},
        {"from": "gpt", "value": "Open Settings, choose Account, then Reset password. You will get an e-mail "
                                 "with a link; it is valid for 24 hours."}]} for i in range(200)]))
    wizard = DatastoreWizard(args.model, tokenizer_loader=lambda _spec: engine.tokenizer,
                             sources=[f"code:{sysconfig.get_paths()['stdlib']}/json", f"chat:{chats}"])
    wizard.resize(820, 640)
    wizard.show()
    wizard.sources_page.source_list.setCurrentRow(1)
    settle()
    save(wizard, "wizard-sources.png")
    wizard.next()
    settle()
    save(wizard, "wizard-options.png")
    wizard.back()  # the whole standard library makes a build long enough to be seen running
    wizard.add_source(f"code:{sysconfig.get_paths()['stdlib']}")
    wizard.next()
    wizard.next()
    bar = wizard.build_page.findChild(QProgressBar, "buildProgress")
    wait_until(lambda: bar.maximum() > 0 and bar.value() > bar.maximum() * 0.3)
    save(wizard, "wizard-build.png")
    wait_until(lambda: wizard.currentPage().objectName() == "summaryPage", 300_000)
    settle()
    save(wizard, "wizard-summary.png")
    wizard.button(QWizard.WizardButton.FinishButton).click()


if args.only in (None, "window"):
    window_shots()
if args.only in (None, "wizard"):
    wizard_shots()
