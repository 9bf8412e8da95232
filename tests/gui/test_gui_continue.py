"""Continue in the window (issue 62, offscreen Qt, a tiny real model): an answer cut at the length
limit offers Continue, and clicking it writes on in the same message, streamed in its place; an
answer that ended by itself does not offer it, and one the loop guard stopped says so."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import QUrl
from runtime_helpers import runtime_for

from draftscope.engine.events import StepEvent, StepTree
from draftscope.gui.chat.view import CURSOR
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore


def window_with(qtbot, engine, tmp_path) -> MainWindow:
    runtime = runtime_for(engine, max_new_tokens=12, temperature=0.0, stop_loops=False)
    window = MainWindow(runtime, HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    return window


def answered(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.streaming, timeout=60_000)


def test_a_cut_answer_offers_continue_and_it_writes_on_in_the_same_message(qtbot, chat_engine, tmp_path):
    w = window_with(qtbot, chat_engine, tmp_path)
    w.chat_input.setPlainText("Hello there")
    w.send()
    answered(qtbot, w)
    user, cut = w.history.messages(w.conversation_id)
    assert cut.stats["finish_reason"] == "length" and cut.stats["tokens"] == 12
    assert f"action:continue/{cut.id}" in w.chat_view.toHtml() and "Continue" in w.chat_view.toPlainText()

    w.chat_view.anchorClicked.emit(QUrl(f"action:continue/{cut.id}"))
    shown = w.chat_view.toPlainText()  # streaming: the answer is shown once, as the one being written
    assert w.streaming and shown.count("Assistant") == 1 and shown.count(CURSOR) == 1
    assert len(w.chat_view.current_steps) == len(w.history.steps(cut.id)), "its steps so far, then the new ones"
    answered(qtbot, w)

    messages = w.history.messages(w.conversation_id)
    assert [m.id for m in messages] == [user.id, cut.id], "the same message, not a new one or a version"
    longer = messages[1]
    assert longer.content.startswith(cut.content) and len(longer.content) > len(cut.content)
    assert longer.stats["tokens"] == 24 and longer.versions == ()
    assert f"action:continue/{cut.id}" in w.chat_view.toHtml(), "cut again at the limit: it may go on"
    assert longer.content.split()[-1] in w.chat_view.toPlainText()
    stored = w.history.steps(cut.id)  # the panels followed the whole answer: a step is the same index live and kept
    assert len(w.inspection.steps) == len(stored) and w.inspection.answer == cut.id
    assert [t for s in w.inspection.steps for t in s.token_ids] == [t for s in stored for t in s["token_ids"]]


def step(token_ids: list[int]) -> StepEvent:
    n = len(token_ids)
    return StepEvent(
        step=1, token_ids=token_ids, pieces=["x"] * n, provenance=["target"] * n, tree=StepTree(),
        accepted_path=[], proposed=0, accepted=0, draft_ms=0, verify_ms=1, total_ms=1, tokens_total=n,
        steps_total=1, tau=n, tokens_per_second=0, speedup_estimate=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    "finish, offered, written",
    [("eos", False, "xxx"), ("stop", False, "xxx"), ("loop", True, "xxx"), ("length", True, "xxx")]
    + [("length", False, "another model's tokens")],  # its ids mean other text to this tokenizer
)
def test_continue_is_offered_only_under_a_cut_answer(qtbot, chat_engine, tmp_path, finish, offered, written):
    w = window_with(qtbot, chat_engine, tmp_path)
    conversation = w.history.create_conversation("c")
    w.history.add_message(conversation, "user", "Say it")
    stats = {"tokens": 3, "tau": 1.0, "finish_reason": finish, "prompt_tokens": 10}
    tokens = step(chat_engine.tokenizer.encode(written, add_special_tokens=False))
    answer = w.history.add_message(conversation, "assistant", "xxx", stats=stats, steps=[tokens])
    w.show_conversation(conversation)
    assert (f"action:continue/{answer}" in w.chat_view.toHtml()) is offered
    assert ("stopped: the answer repeated itself" in w.chat_view.toPlainText()) is (finish == "loop")


def test_the_loops_checkbox_is_the_setting_every_answer_is_asked_with(qtbot, chat_engine, tmp_path):
    from draftscope.gui.dialogs.settings_tabs import GenerationTab
    from draftscope.storage import Settings

    tab = GenerationTab()
    qtbot.addWidget(tab)
    tab.show_settings(Settings(stop_loops=False))
    assert not tab.stop_loops.isChecked() and tab.values(Settings())["stop_loops"] is False
    tab.stop_loops.setChecked(True)
    assert tab.values(Settings())["stop_loops"] is True
    w = window_with(qtbot, chat_engine, tmp_path)
    assert w.session.request().stop_loops is False
    w.runtime.settings = Settings(stop_loops=True)
    assert w.session.request().stop_loops is True
