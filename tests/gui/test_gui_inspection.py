"""Inspecting how answers were drafted: race mode, token provenance in the chat, a stored answer's steps."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import pin_budget, tiny_llama
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QTextBrowser
from runtime_helpers import runtime_for

from draftscope.engine.engine import Engine
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore


def test_race_finishes_both_sides_and_replays_them(qtbot, tokenizer, tmp_path):
    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, sharpen=4.0)
    engine = pin_budget(Engine(model, tokenizer, name="tiny"))
    window = MainWindow(runtime_for(engine, max_new_tokens=60), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    window.chat_input.setPlainText("one two three one two three one two three")
    window.race_action.trigger()
    race = window.race_dialog
    assert race.isVisible() and race.prompt.toPlainText().startswith("one two three")
    with qtbot.waitSignal(race.finished_race, timeout=120_000):
        qtbot.mouseClick(race.findChild(QPushButton, "raceButton"), Qt.MouseButton.LeftButton)
    plain, spec = race.lanes["plain"], race.lanes["speculative"]
    assert plain.tokens > 0 and spec.tokens == plain.tokens
    assert plain.moments[-1][1] == spec.moments[-1][1], "greedy: both sides write the same answer"
    assert all(a[0] <= b[0] for a, b in zip(plain.moments, plain.moments[1:])), "moments in time order"
    # the replay plays both at their real pace and ends with the full answers and a verdict
    qtbot.waitUntil(lambda: not race.timer.isActive(), timeout=max(10_000, int(plain.elapsed_s * 1000) + 5000))
    for key in ("Plain", "Speculative"):
        assert race.findChild(QTextBrowser, f"race{key}View").toPlainText() == plain.moments[-1][1]
        assert "tokens/s" in race.findChild(QLabel, f"race{key}Stats").text()
    assert "× the speed of plain decoding" in race.findChild(QLabel, "raceVerdict").text()
    assert "of writing" in race.findChild(QLabel, "raceVerdict").text()
    assert "first token" in race.findChild(QLabel, "racePlainStats").text()
    # halfway through a replay, each side shows what it had written by then
    half = plain.elapsed_s / 2
    assert (
        plain.text_at(half) == max((m for m in plain.moments if m[0] <= half), key=lambda m: m[0], default=(0, ""))[1]
    )
    qtbot.mouseClick(race.findChild(QPushButton, "raceCloseButton"), Qt.MouseButton.LeftButton)
    assert not race.isVisible(), "the race closes by its own button"


def test_colour_drafted_tokens_marks_each_token_with_its_source_and_step(qtbot, tokenizer, tmp_path):
    from PySide6.QtGui import QTextCursor

    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, sharpen=4.0)
    engine = pin_budget(Engine(model, tokenizer, name="tiny"))
    window = MainWindow(runtime_for(engine, max_new_tokens=60), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    window.chat_input.setPlainText("one two three one two three one two three")
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000) as done:
        window.send()
    qtbot.waitUntil(lambda: not window.streaming, timeout=5000)
    final = done.args[0]
    steps = window.history.steps(window.history.messages(window.conversation_id)[-1].id)
    drafted = [(s["step"], p) for s in steps for p, src in zip(s["pieces"], s["provenance"]) if src == "context"]
    assert drafted, "the repetitive prompt gets drafts accepted from the conversation"
    window.provenance_action.trigger()
    assert window.findChild(QLabel, "provenanceLegend").isVisible()
    doc = window.chat_view.document()
    tips = set()
    cursor = QTextCursor(doc)
    while not cursor.atEnd():
        cursor.movePosition(QTextCursor.MoveOperation.NextCharacter)
        tips.add(cursor.charFormat().toolTip())
    assert f"step {drafted[0][0]}: drafted from the conversation" in tips
    assert any(t.endswith("written by the target model") for t in tips)
    assert final.stats.tokens == sum(len(s["pieces"]) for s in steps)
    window.provenance_action.trigger()  # back to Markdown: no token marks left
    assert "drafted from" not in window.chat_view.document().toHtml()
    assert not window.findChild(QLabel, "provenanceLegend").isVisible()


def test_inspect_drafts_replays_a_stored_answer_after_a_restart(qtbot, tokenizer, tmp_path):
    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, sharpen=4.0)
    engine = pin_budget(Engine(model, tokenizer, name="tiny"))
    db = tmp_path / "h.sqlite3"
    first = MainWindow(runtime_for(engine, max_new_tokens=40), HistoryStore(db))
    qtbot.addWidget(first)
    live = []
    first.answer_signals.steps.connect(live.extend)
    first.chat_input.setPlainText("one two three one two three")
    with qtbot.waitSignal(first.answer_signals.answer_ended, timeout=60_000):
        first.send()
    qtbot.waitUntil(lambda: not first.streaming, timeout=5000)
    conv = first.conversation_id
    first.close()

    window = MainWindow(runtime_for(engine), HistoryStore(db))
    qtbot.addWidget(window)
    window.show()
    window.show_conversation(conv)
    answer = window.history.messages(conv)[-1]
    with qtbot.waitSignal(window.answer_selected, timeout=5000) as picked:
        window.chat_view.anchorClicked.emit(
            __import__("PySide6.QtCore", fromlist=["QUrl"]).QUrl(f"action:inspect/{answer.id}")
        )
    message_id, steps = picked.args
    assert message_id == answer.id and steps == live, "the stored steps equal the streamed StepEvents"
    assert all(window.docks[n].isVisible() for n in ("draftsDock", "trieDock", "speedupDock"))


def test_the_panels_follow_the_conversation_opened(qtbot, tokenizer, tmp_path):
    """After New conversation the panels are empty; opening another conversation shows its own last
    answer, never the one of the conversation left."""
    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, sharpen=4.0)
    engine = pin_budget(Engine(model, tokenizer, name="tiny"))
    window = MainWindow(runtime_for(engine, max_new_tokens=12), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    answers = {}
    for question in ("one two three one two three", "four five six four five six"):
        window.new_conversation()
        window.chat_input.setPlainText(question)
        with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):
            window.send()
        qtbot.waitUntil(lambda: not window.streaming, timeout=5000)
        answers[window.conversation_id] = window.history.messages(window.conversation_id)[-1].id
    first, second = answers
    window.new_conversation()
    assert window.inspection.steps == [] and window.drafts_panel.model.rowCount() == 0
    window.show_conversation(first)
    assert window.inspection.answer == answers[first] and window.inspection.steps
    window.show_conversation(second)
    assert window.inspection.answer == answers[second]
    assert window.drafts_panel.model.rowCount() == len(window.history.steps(answers[second]))


def test_help_lists_the_shortcuts_that_work_and_about_names_the_model(qtbot, tokenizer, tmp_path):
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QMessageBox, QTableWidget

    engine = Engine(tiny_llama(len(tokenizer), seed=3), tokenizer, name="tiny")
    window = MainWindow(runtime_for(engine), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.findChild(QAction, "shortcutsAction").trigger()
    table = window.help_dialog.findChild(QTableWidget, "shortcutsTable")
    rows = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(table.rowCount())}
    assert rows["Regenerate answer"] == "Ctrl+R" and rows["New conversation"] == "Ctrl+N"
    assert rows["Send the message"] == "Enter" and rows["Keyboard shortcuts"] == "F1"
    window.help_dialog.close()
    window.findChild(QAction, "aboutAction").trigger()
    assert isinstance(window.help_dialog, QMessageBox) and "tiny" in window.help_dialog.text()


def test_the_race_times_the_writing_not_the_prompt_the_other_lane_read_for_it():
    """The lane that runs second finds the prompt in the kept cache: the race compares what each
    wrote after its first token, and shows the first token's wait apart."""
    from types import SimpleNamespace

    from draftscope.gui.dialogs.race import Lane

    slow_reader, cached = Lane("plain"), Lane("speculative")
    for lane, first_ms, total_s in ((slow_reader, 2000.0, 3.0), (cached, 50.0, 1.05)):
        lane.moments = [(first_ms / 1000, "a"), (total_s, "a b c")]
        stats = SimpleNamespace(time_to_first_token_ms=first_ms, elapsed_s=total_s, tokens=11)
        lane.finish(SimpleNamespace(stats=stats, text="a b c"))
    assert slow_reader.elapsed_s == pytest.approx(1.0) and cached.elapsed_s == pytest.approx(1.0)
    assert slow_reader.first_token_s == pytest.approx(2.0), "the reading is kept, shown apart"
    assert slow_reader.moments[0][0] == pytest.approx(0.0), "the replay starts each lane at its first token"
    assert slow_reader.tokens_per_second == pytest.approx(10.0), "tokens after the first over the writing"
