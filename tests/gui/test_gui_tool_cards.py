"""Tool call cards in the transcript (offscreen Qt, no model): a conversation's calls drawn from what
the history keeps (so a restart shows them), each result folded behind its size and unfolded by its
link, a call waiting for the user with Approve / Deny / Always whose links reach the window, a failure
said in words naming the server, and the results never shown as messages of their own."""

import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication

from draftscope.gui.chat.tool_cards import SHOWN_CHARS, CardCall, card_html, size_words
from draftscope.gui.chat.view import ChatTranscript
from draftscope.storage import HistoryStore

NOTE = "Harbour log, entry 7\nThe lighthouse keeper counted 41 gulls.\n"


def call(call_id: str, tool: str, **arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": tool, "arguments": arguments}}


def conversation(history: HistoryStore, *, big: int = 0) -> int:
    """A question, an answer that called two tools, their results (one failed), the final answer."""
    cid = history.create_conversation("notes")
    history.add_message(cid, "user", "What does the harbour note say?")
    calls = [call("call_a", "read_note", name="harbour"), call("call_b", "add", a=2, b=3)]
    history.add_message(cid, "assistant", "Let me read it.", tool_fields={"tool_calls": calls})
    result = NOTE + ("x" * big)
    history.add_message(
        cid,
        "tool",
        result,
        tool_fields={
            "tool_call_id": "call_a",
            "name": "read_note",
            "server": "files",
            "status": "ok",
            "chars": len(result),
        },
    )
    failure = "server 'calc' stopped during the call: exit code 7"
    history.add_message(
        cid,
        "tool",
        failure,
        tool_fields={
            "tool_call_id": "call_b",
            "name": "add",
            "server": "calc",
            "status": "failed",
            "chars": len(failure),
        },
    )
    history.add_message(cid, "assistant", "The keeper counted 41 gulls.")
    return cid


def transcript(qtbot, history, cid) -> ChatTranscript:
    engine = SimpleNamespace(max_context=4096, tokenizer=None)
    session = SimpleNamespace(history=history, conversation_id=cid, continuing=None, engine=engine)
    view = ChatTranscript(session)
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    return view


def click(view: ChatTranscript, href: str) -> None:
    view.anchorClicked.emit(QUrl(href))


def test_a_restart_shows_the_calls_their_results_folded_and_a_failure_naming_its_server(qtbot, tmp_path):
    db = tmp_path / "h.sqlite3"
    cid = conversation(HistoryStore(db))
    view = transcript(qtbot, HistoryStore(db), cid)  # a new store on the same file: as after a restart
    text = view.toPlainText()
    assert "Let me read it." in text and "The keeper counted 41 gulls." in text
    assert "read_note" in text and "on files" in text and '{"name": "harbour"}' in text
    assert "add" in text and '{"a": 2, "b": 3}' in text
    assert f"show result ({size_words(len(NOTE))})" in text
    assert "lighthouse keeper" not in text, "a result is folded until asked for"
    assert "failed" in text and "server 'calc' stopped during the call" in text
    assert text.count("Assistant") == 2 and "You" in text, "results are no messages of their own"

    result_id = next(m.id for m in HistoryStore(db).messages(cid) if m.role == "tool")
    click(view, f"tool:show/{result_id}")
    assert "The lighthouse keeper counted 41 gulls." in view.toPlainText()
    click(view, f"tool:copy/{result_id}")
    assert QApplication.clipboard().text().startswith("Harbour log")
    click(view, f"tool:hide/{result_id}")
    assert "lighthouse keeper" not in view.toPlainText()


def test_a_big_result_shows_its_beginning_and_says_how_much(qtbot, tmp_path):
    db = tmp_path / "h.sqlite3"
    history = HistoryStore(db)
    cid = conversation(history, big=1_000_000)
    view = transcript(qtbot, history, cid)
    assert "show result (1.0 MB)" in view.toPlainText()
    result_id = next(m.id for m in history.messages(cid) if m.role == "tool")
    click(view, f"tool:show/{result_id}")
    text = view.toPlainText()
    assert f"the first {size_words(SHOWN_CHARS)} of 1.0 MB shown" in text
    assert len(text) < SHOWN_CHARS + 2000, "the view lays out the beginning only"


def test_a_waiting_call_offers_the_three_decisions_and_hands_them_on(qtbot, tmp_path):
    history = HistoryStore(tmp_path / "h.sqlite3")
    cid = history.create_conversation("t")
    history.add_message(cid, "user", "Add 2 and 3")
    history.add_message(cid, "assistant", "", tool_fields={"tool_calls": [call("call_x", "add", a=2, b=3)]})
    live = SimpleNamespace(
        id="call_x", server="calc", arguments={"a": 2, "b": 3}, state="asking", result="", seconds=0.0, message_id=None
    )
    view = transcript(qtbot, history, cid)
    view.live_calls = lambda: {"call_x": live}
    view.render()
    text = view.toPlainText()
    assert "waits for your approval" in text and "on calc" in text
    assert "Approve" in text and "Deny" in text and "Always for this tool" in text
    heard = []
    view.tool_decision.connect(lambda verb, call_id: heard.append((verb, call_id)))
    for verb in ("approve", "deny", "always"):
        click(view, f"tool:{verb}/call_x")
    assert heard == [("approve", "call_x"), ("deny", "call_x"), ("always", "call_x")]

    live.state = "running"  # the card follows the loop's state
    view.render()
    assert "running" in view.toPlainText() and "Approve" not in view.toPlainText()


def test_a_card_escapes_what_the_model_and_the_server_wrote():
    card = CardCall("c1", "<b>x</b>", "srv<i>", {"q": "<a href='tool:approve/c1'>"}, "failed", "<script>", 8)
    out = card_html(card)
    assert "<b>x</b>" not in out and "srv<i>" not in out and "<a href='tool" not in out and "<script>" not in out
