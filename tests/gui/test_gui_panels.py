"""The inspection panels inside the main window (offscreen Qt, tiny real model): the drafts table,
the draft tree and the speedup chart agree with the streamed StepEvents; a step picked in any
panel or in the chat is selected everywhere; the datastore wizard opens from the menu and its
"use this datastore now" switches the drafters."""

import json
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import pin_budget, tiny_llama
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QLabel, QPushButton, QTableView, QWizard
from runtime_helpers import runtime_for

from draftscope.core.runtime import Runtime
from draftscope.engine.engine import Engine
from draftscope.gui.main_window import MainWindow
from draftscope.gui.panels.docks import TREE_MIN_HEIGHT
from draftscope.gui.panels.drafts import visible_text
from draftscope.storage import HistoryStore, Settings

PROMPT = "one two three four one two three four one two three four"


@pytest.fixture(scope="module")
def engine(tokenizer):
    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, sharpen=4.0)
    # The step policy (not under test here) decides from timings; a busy machine may make it
    # decode plainly, so every answer verifies a fixed 16 nodes per step.
    engine = pin_budget(Engine(model, tokenizer, name="tiny"))
    engine.measure_baseline(12)
    return engine


def streamed_window(qtbot, engine, tmp_path, *, max_new_tokens=60):
    """A window that has answered PROMPT; returns it and the StepEvents it streamed."""
    window = MainWindow(runtime_for(engine, max_new_tokens=max_new_tokens), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    window.show_panels()
    live = []
    window.answer_signals.steps.connect(live.extend)
    window.chat_input.setPlainText(PROMPT)
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):
        window.send()
    qtbot.waitUntil(lambda: not window.streaming, timeout=5000)
    assert live and any(ev.accepted for ev in live), "the repetitive prompt gets drafts accepted"
    return window, live


def table_text(table: QTableView, row: int, col: int) -> str:
    return table.model().index(row, col).data()


def test_panels_agree_with_the_streamed_steps(qtbot, engine, tmp_path):
    window, live = streamed_window(qtbot, engine, tmp_path)
    last = live[-1]

    table = window.findChild(QTableView, "draftsTable")
    assert table.model().rowCount() == len(live)
    for row, ev in enumerate(live):
        assert table_text(table, row, 0) == ev.step
        assert table_text(table, row, 1) == ev.proposed
        assert table_text(table, row, 2) == ev.accepted
        assert table_text(table, row, 3) == visible_text("".join(ev.pieces[: ev.accepted]))
        drafted = sorted({s for s in ev.provenance[: ev.accepted]})
        assert table_text(table, row, 4) == (", ".join(drafted) or "—")
        assert table_text(table, row, 5) == f"{ev.draft_ms:.1f}" and table_text(table, row, 6) == f"{ev.verify_ms:.1f}"
    summary = window.findChild(QLabel, "draftsSummary").text()
    assert f"{len(live)} steps" in summary and f"{last.tokens_total} tokens" in summary

    trie = window.trie_view
    assert trie.current_index() == len(live) - 1, "the tree follows the live step"
    assert trie.accepted_nodes() == last.accepted_path
    nodes = trie.node_items()
    assert all(i in nodes for i in range(len(last.tree.tokens))) and -1 in nodes

    speedup = window.speedup_panel
    assert len(speedup.rate_points()) == len(live) and len(speedup.tau_points()) == len(live)
    assert [y for _, y in speedup.tau_points()] == [float(len(ev.token_ids)) for ev in live]
    plain = last.plain_tokens_per_second or engine.baseline_tokens_per_second  # at this answer's context
    assert speedup.baseline_points() and all(y == pytest.approx(plain) for _, y in speedup.baseline_points())
    # the last step's speedup, or "at most τ" where a busy moment made the plain figure out of date
    from draftscope.core.words import speedup_stale

    expected = (
        f"≤{last.tau:.2f}×" if speedup_stale(last.speedup_estimate, last.tau) else f"{last.speedup_estimate:.2f}×"
    )
    assert window.findChild(QLabel, "speedupLabel").text() == expected

    stats = window.history.messages(window.conversation_id)[-1].stats
    assert stats["baseline_tokens_per_second"] == pytest.approx(engine.baseline_tokens_per_second)


def test_at_the_default_size_the_draft_tree_has_room_beside_the_speedup_charts(qtbot, engine, tmp_path):
    window = MainWindow(runtime_for(engine), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()  # the window's own default size
    assert (window.width(), window.height()) == (1100, 720)
    window.show_panels()
    qtbot.waitUntil(lambda: window.trie_view.view.isVisible() and window.speedup_panel.view.isVisible())
    qtbot.wait(50)  # the docks' layout settles
    tree, speedup = window.trie_view.view, window.speedup_panel
    assert tree.height() >= TREE_MIN_HEIGHT, tree.height()  # was ~40 px: nodes clipped
    # the speedup charts keep their room too, and the table stays a usable height
    assert speedup.view.height() >= speedup.view.minimumHeight() > 0
    assert speedup.tau_view.height() >= speedup.tau_view.minimumHeight() > 0
    assert window.drafts_panel.height() >= 120


def test_a_step_picked_anywhere_is_selected_everywhere(qtbot, engine, tmp_path):
    window, live = streamed_window(qtbot, engine, tmp_path)
    window.provenance_action.setChecked(True)  # tokens become links to their steps
    table = window.findChild(QTableView, "draftsTable")
    picked = next(i for i, ev in enumerate(live) if ev.accepted >= 1 and i < len(live) - 1)

    # a row of the drafts table
    rect = table.visualRect(table.model().index(picked, 3))
    table.scrollTo(table.model().index(picked, 3))
    rect = table.visualRect(table.model().index(picked, 3))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.inspection.selected == picked
    assert window.trie_view.current_index() == picked and not window.trie_view.follow_live()
    assert window.trie_view.accepted_nodes() == live[picked].accepted_path
    marks = window.chat_view.extraSelections()
    shown = "".join(m.cursor.selectedText() for m in marks)
    # the step's text is marked where it shows (spaces carry no token's mark in rendered Markdown)
    assert "".join(shown.split()) == "".join("".join(live[picked].pieces).split())

    # the draft tree's "previous step" button
    qtbot.mouseClick(window.findChild(QPushButton, "prevStepButton"), Qt.MouseButton.LeftButton)
    assert window.inspection.selected == picked - 1
    assert window.drafts_panel.selected_step() == picked - 1
    assert f"Step {live[picked - 1].step}" in window.findChild(QLabel, "stepLabel").text()

    # a token in the chat: the stored answer's link for the step
    answer = window.history.messages(window.conversation_id)[-1]
    window.chat_view.anchorClicked.emit(QUrl(f"step:{answer.id}/{len(live) - 1}"))
    assert window.inspection.selected == len(live) - 1 and window.inspection.answer == answer.id
    assert window.drafts_panel.selected_step() == len(live) - 1
    assert window.trie_view.current_index() == len(live) - 1


def test_inspecting_an_old_answer_fills_the_panels_from_the_history(qtbot, engine, tmp_path):
    window, streamed = streamed_window(qtbot, engine, tmp_path, max_new_tokens=30)
    live = list(streamed)  # the first answer's steps (the list keeps growing with the second)
    first = window.history.messages(window.conversation_id)[-1]
    window.chat_input.setPlainText("five six seven five six seven five six seven")
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):
        window.send()
    qtbot.waitUntil(lambda: not window.streaming, timeout=5000)
    assert window.drafts_panel.model.rowCount() == len(streamed) - len(live), "the panels show the new answer"

    window.chat_view.anchorClicked.emit(QUrl(f"action:inspect/{first.id}"))
    assert window.drafts_panel.model.rowCount() == len(live)
    assert window.inspection.answer == first.id and window.inspection.selected == len(live) - 1
    assert len(window.speedup_panel.rate_points()) == len(live)
    assert window.trie_view.accepted_nodes() == live[-1].accepted_path


def test_wizard_from_the_menu_builds_and_the_app_drafts_from_it(qtbot, engine, tmp_path, monkeypatch):
    from draftscope.drafters import RetrievalDrafter
    from draftscope.gui.launcher import Launcher

    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    chats = tmp_path / "chats.json"
    chats.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": f"Question {i}"},
                        {"from": "gpt", "value": f"one two three four {i}"},
                    ]
                }
                for i in range(20)
            ]
        )
    )
    launcher = Launcher(
        lambda settings, log=None: Runtime(settings, engine),
        HistoryStore(tmp_path / "h.sqlite3"),
        Settings(drafters={"retrieval": False, "context": True, "model": False}),
        settings_file=tmp_path / "settings.json",
    )
    with qtbot.waitSignal(launcher.window_ready, timeout=10_000) as ready:
        launcher.start()
    window = ready.args[0]
    qtbot.addWidget(window)
    assert not any(isinstance(d, RetrievalDrafter) for d in window.make_drafters())

    window.wizard_action.trigger()
    wizard = window.datastore_wizard
    qtbot.waitUntil(wizard.isVisible, timeout=5000)
    assert wizard.add_source(f"chat:{chats}")
    for _ in range(2):  # sources -> options -> build
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.NextButton), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=30_000)
    with qtbot.waitSignal(window.datastore_chosen, timeout=5000) as chosen:
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.FinishButton), Qt.MouseButton.LeftButton)
    path = chosen.args[0]
    assert path == str(wizard.result_path())
    assert launcher.settings.datastore == path and launcher.settings.drafters["retrieval"]
    assert any(isinstance(d, RetrievalDrafter) for d in window.make_drafters()), "drafts come from it now"
    assert wizard.result_path().name in window.status.datastore.text()
