"""Render the desktop app with real answers to docs/screenshots/ (offscreen Qt): the main window
in the light and the dark theme with the inspection panels, each panel on its own, the chat with
drafted tokens coloured; the race of plain against speculative decoding, the settings and the
first run's two pages; the pages of the datastore wizard building from real files; and a question
answered with a tool of an MCP server (the tests' fixture server): its call waiting for approval,
then the answer after its result.

    QT_QPA_PLATFORM=offscreen python scripts/screenshots.py [--model qwen2.5-coder-1.5b] [--only window|dialogs|wizard|files|tools]

The model runs as the app runs it (the runtime from Settings: a GGUF on llama.cpp); drafts come
from the default chat datastore when it was built (`draftscope datastore build-default`), the
conversation and, as in a first session, nothing learned yet.
"""

import argparse
import json
import os
import sys
import sysconfig
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtWidgets import QApplication, QProgressBar, QWizard

from draftscope.core.runtime import load_runtime
from draftscope.drafters.learned import LearnedStore
from draftscope.gui.main_window import MainWindow
from draftscope.gui.theme import app_icon, apply_theme, code_style
from draftscope.storage import HistoryStore, Settings

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="qwen2.5-coder-1.5b")
parser.add_argument("--max-new-tokens", type=int, default=200)
parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "screenshots"))
parser.add_argument("--only", choices=("window", "dialogs", "wizard", "files", "tools"))
parser.add_argument(
    "--head-model",
    default="smollm2-135m",
    help="the model the recurrent drafter's training is shown on (on torch: it reads hidden states)",
)
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

app = QApplication([])
app.setWindowIcon(app_icon())
apply_theme(app, "light", 10)
# the default sampling a user gets (the model's own, else LM Studio's and Ollama's), one seed so a
# retake shows the same answers
runtime = load_runtime(Settings(model=args.model, max_new_tokens=args.max_new_tokens, seed=1))
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
    window.resize(1280, 760)
    window.show()
    settle()
    save(window, "welcome.png")  # what a first start shows: the example prompts
    window.resize(1500, 940)
    window.show_panels()
    window.resizeDocks([window.docks["trieDock"], window.docks["speedupDock"]], [520, 340], Qt.Orientation.Vertical)
    window.resizeDocks([window.docks["trieDock"]], [620], Qt.Orientation.Horizontal)
    # a code question, then an edit of the code: where drafts from the conversation pay most
    for question in (
        "Write a short Python function that checks whether a string is a palindrome.",
        "Add type hints and a one-line docstring to that function.",
    ):
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
    # as a first start shows it: the default size (1100 x 720) and the app's own font, panels open
    apply_theme(app, "light", Settings().font_size)
    window.resize(1100, 720)
    settle()
    window.show_panels()  # as opening them at this size lays them out
    window.inspection.select(best)
    settle()
    save(window, "main-window-default-size.png")
    apply_theme(app, "light", 10)
    for name, dock in window.docks.items():
        dock.setFloating(True)
        dock.resize(900, 560 if name != "draftsDock" else 420)
        settle()
        save(
            dock.widget(),
            {"draftsDock": "drafts-panel.png", "trieDock": "trie-view.png", "speedupDock": "speedup-panel.png"}[name],
        )
    window.close()


def files_shots() -> None:
    """A real file of Python's standard library attached (its chip before sending), then the answer
    that gives back one of its functions with a change, drafted tokens coloured."""
    source = Path(sysconfig.get_paths()["stdlib"]) / "colorsys.py"
    text = source.read_text()
    start = text.index("def rgb_to_hsv")
    attached = Path(tempfile.mkdtemp()) / "colorsys_part.py"
    attached.write_text(text[start : text.index("\ndef ", start + 10)])
    window = MainWindow(runtime, HistoryStore(Path(tempfile.mkdtemp()) / "h.sqlite3"), code_style=code_style("light"))
    window.resize(1300, 860)
    window.show()
    window.composer.attach_paths([str(attached)])
    wait_until(lambda: bool(window.composer.chips.files), 60_000)  # read on a worker
    window.chat_input.setPlainText("Add type hints to rgb_to_hsv and give back the whole function, code only.")
    settle()
    save(window, "attach-before-sending.png")
    window.provenance_action.setChecked(True)
    runtime.settings.max_new_tokens = 400  # the whole function
    window.send()
    wait_until(lambda: not window.streaming, 300_000)
    runtime.settings.max_new_tokens = args.max_new_tokens
    settle()
    save(window, "attach-answer.png")
    window.close()


def tools_shots() -> None:
    """The model asked about a note it can read with an MCP server's tool (the tests' fixture server,
    its other tools switched off): the call waiting for approval, then the answer after its result."""
    from draftscope.toolbox.servers import McpServer

    fixture = Path(__file__).resolve().parents[1] / "tests" / "toolbox" / "mcp_fixture_server.py"
    others = ("add", "big_result", "crash", "hang", "fail", "env_value", "garbage", "pid")
    notes = McpServer("notes", command=sys.executable, args=(str(fixture),), disabled_tools=others)
    runtime.settings.mcp_servers = [notes.to_dict()]
    window = MainWindow(runtime, HistoryStore(Path(tempfile.mkdtemp()) / "h.sqlite3"), code_style=code_style("light"))
    window.resize(1200, 820)
    window.show()
    host = window.tool_loop.host  # the model is free to call (tool choice "auto"), as a user's is
    wait_until(lambda: bool(host.tools or host.problems), 60_000)
    window.chat_input.setPlainText("What does my note called 'harbour' say? How many gulls were counted?")
    window.send()
    calls = window.tool_loop.live_calls
    wait_until(lambda: any(c.state == "asking" for c in calls().values()) or not window.streaming, 300_000)
    settle()
    save(window, "tool-call-asking.png")

    def approve() -> bool:  # a call that waits is approved
        for call in [c for c in calls().values() if c.state == "asking"]:
            window.tool_loop.decide("approve", call.id)
        return not window.streaming

    wait_until(approve, 300_000)
    window.chat_view.unfolded.update(m.id for m in window.history.messages(window.conversation_id) if m.role == "tool")
    window.chat_view.refresh()
    settle()
    save(window, "tool-call-answer.png")
    window.close()
    runtime.settings.mcp_servers = []


def dialog_shots() -> None:
    from draftscope.gui.dialogs.first_run import FirstRunDialog
    from draftscope.gui.dialogs.race import RaceDialog
    from draftscope.gui.dialogs.settings_dialog import SettingsDialog
    from draftscope.models import catalog

    # the race: one prompt answered plainly, then speculatively, replayed side by side at real pace
    race = RaceDialog(runtime)
    race.resize(1000, 600)
    race.show()
    # an edit of code in the prompt: the answer copies most of it, which drafts from the conversation
    # predict (a list rewritten in another order, by contrast, is drafted wrong at every item)
    race.race(
        "Rename the variable `x` to `total` in this function; answer with the code only.\n\n"
        "def summarize(orders):\n    x = 0\n    for order in orders:\n        if order.paid and not "
        "order.refunded:\n            x += order.amount - order.discount\n    return x\n"
    )
    wait_until(lambda: race._running is None and race.lanes and not race.timer.isActive(), 300_000)
    settle()
    save(race, "race.png")
    race.done(0)

    settings = SettingsDialog(runtime.settings, learned=runtime.learned_text())
    settings.resize(740, 420)
    settings.show()
    settle()
    save(settings, "settings.png")
    settings.done(0)

    # the first run, with this model chosen (a catalogue model already downloaded, else its file)
    first = FirstRunDialog(Settings(), settings_file=Path(tempfile.mkdtemp()) / "settings.json")
    first.resize(640, 620)
    first.show()
    settle()
    save(first, "first-run-model.png")
    model = catalog.find(args.model)
    if model is not None and model.fetched:
        first.catalog_radios[model.name].setChecked(True)
    else:
        first.local_radio.setChecked(True)
        first.local_path.setText(args.model)
    first.continue_button.click()
    wait_until(lambda: first.pages.currentIndex() == 1, 10_000)
    settle()
    save(first, "first-run-datastore.png")
    first.done(0)

    # training the recurrent drafter: on torch (it reads the model's hidden states), a short run
    # from a chat file, the head written to scratch space (the user's own head stays)
    from draftscope.engine.engine import Engine
    from draftscope.gui.dialogs.train_head import TrainHeadDialog

    scratch = Path(tempfile.mkdtemp())
    chats = scratch / "chats.jsonl"
    chats.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"How do I reverse a list of {n} items in Python?"},
                        {
                            "role": "assistant",
                            "content": "Use slicing, `items[::-1]`, for a reversed copy, or `items.reverse()` "
                            "to reverse it in place.",
                        },
                    ]
                }
            )
            + "\n"
            for n in range(40)
        )
    )
    head_engine = Engine.load(args.head_model, backend="torch", dtype="float32", measure=False)
    dialog = TrainHeadDialog(head_engine, args.head_model, out=scratch / "head.safetensors")
    dialog.resize(600, 330)
    dialog.show()
    dialog.data_combo.setCurrentIndex(dialog.data_combo.findData("chat"))
    dialog.path_edit.setText(str(chats))
    dialog.tokens_spin.setValue(2_000)
    trained = []
    dialog.head_trained.connect(trained.append)
    dialog.start()
    wait_until(lambda: trained or dialog.error.isVisible(), 600_000)
    settle()
    save(dialog, "train-head.png")
    dialog.done(0)


def wizard_shots() -> None:
    from draftscope.gui.wizard.wizard import DatastoreWizard

    os.environ["DRAFTSCOPE_DATA_DIR"] = tempfile.mkdtemp()  # the built index goes to a scratch folder
    folder = Path(tempfile.mkdtemp())
    chats = folder / "support-chats.json"
    chats.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": f"How do I reset my password on device {i}?"},
                        {
                            "from": "gpt",
                            "value": "Open Settings, choose Account, then Reset password. You will get an e-mail "
                            "with a link; it is valid for 24 hours.",
                        },
                    ]
                }
                for i in range(200)
            ]
        )
    )
    wizard = DatastoreWizard(
        args.model,
        tokenizer_loader=lambda _spec: engine.tokenizer,
        sources=[f"code:{sysconfig.get_paths()['stdlib']}/json", f"chat:{chats}"],
    )
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


if args.only in (None, "files"):
    files_shots()
if args.only in (None, "window"):
    window_shots()
if args.only in (None, "dialogs"):
    dialog_shots()
if args.only in (None, "wizard"):
    wizard_shots()
if args.only in (None, "tools"):
    tools_shots()
