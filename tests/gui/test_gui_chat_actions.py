"""The links under a message: an answer offers "Inspect drafts" only where it kept its steps (an
answer imported from ChatGPT has nothing to inspect; issue 62, item 7)."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from runtime_helpers import runtime_for

from draftscope.engine.events import StepEvent, StepTree
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore


def step() -> StepEvent:
    return StepEvent(
        step=1, token_ids=[1], pieces=["Hi"], provenance=["target"], tree=StepTree(), accepted_path=[],
        proposed=0, accepted=0, draft_ms=0, verify_ms=1, total_ms=1, tokens_total=1, steps_total=1, tau=1.0,
        tokens_per_second=0, speedup_estimate=None,
    )  # fmt: skip


def test_inspect_drafts_is_offered_only_for_an_answer_with_its_steps(qtbot, chat_engine, tmp_path):
    history = HistoryStore(tmp_path / "h.sqlite3")
    conversation = history.create_conversation("imported")
    history.add_message(conversation, "user", "Hello")
    imported = history.add_message(conversation, "assistant", "Hi from elsewhere")
    history.add_message(conversation, "user", "Again")
    ours = history.add_message(conversation, "assistant", "Hi", stats={"tokens": 1}, steps=[step()])
    window = MainWindow(runtime_for(chat_engine), history)
    qtbot.addWidget(window)
    window.show_conversation(conversation)
    html = window.chat_view.toHtml()
    assert f"inspect/{ours}" in html and "Inspect drafts" in html
    assert f"inspect/{imported}" not in html and f"regenerate/{imported}" in html
