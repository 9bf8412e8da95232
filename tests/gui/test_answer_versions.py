"""Regenerate keeps answer versions: the history's branches (real SQLite), a version 3 file
migrated, and the window's "‹ 2 / 3 ›" paging with a tiny real model (offscreen Qt): each
version's text shown, the next question built on the version shown, versions kept across a restart
and the plain word when temperature 0 wrote the same text again."""

import os
import sqlite3

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from draftscope.storage import HistoryStore
from draftscope.storage.history_schema import SCHEMA_VERSION
from draftscope.storage.transfer import export_json

STEPS = [{"step": 0, "token_ids": [1, 2], "pieces": ["a", "b"]}]


def test_versions_keep_their_branches_and_the_next_message_follows_the_shown_one(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    c = store.create_conversation()
    store.add_message(c, "user", "q1")
    first = store.add_message(c, "assistant", "answer one", steps=STEPS)
    store.add_message(c, "user", "q2")
    store.add_message(c, "assistant", "later answer")
    store.hide_version(first)  # regenerate: the branch ends at the question while the new one is written
    assert [m.content for m in store.messages(c)] == ["q1"]
    second = store.add_message(c, "assistant", "answer two")
    third_messages = store.messages(c)
    assert [m.content for m in third_messages] == ["q1", "answer two"], "later turns stay with the old version"
    assert third_messages[1].versions == (first, second) and third_messages[1].same_as == 0
    store.show_version(first)  # paging back shows the branch that followed it
    assert [m.content for m in store.messages(c)] == ["q1", "answer one", "q2", "later answer"]
    assert store.steps(first) == STEPS and store.steps(second) == [], "each version keeps its own steps"
    store.show_version(second)
    store.add_message(c, "user", "q3")  # continues from the shown version
    assert [m.content for m in store.messages(c)] == ["q1", "answer two", "q3"]
    assert [m["content"] for m in export_json(store)["conversations"][0]["messages"]] == ["q1", "answer two", "q3"]
    store.hide_version(second)
    again = store.add_message(c, "assistant", "answer two")
    assert store.messages(c)[1].same_as == 2, "the same text as version 2, said once"
    assert store.messages(c)[1].versions == (first, second, again)
    store.delete(c)  # every version and its steps go with the conversation
    assert store._read("SELECT COUNT(*) AS n FROM messages")[0]["n"] == 0
    assert store._read("SELECT COUNT(*) AS n FROM message_steps")[0]["n"] == 0


def test_a_version_3_history_migrates(tmp_path):
    path = tmp_path / "h.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
                                    updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id)
                               ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, created REAL NOT NULL,
                               stats TEXT, drafters TEXT);
        CREATE TABLE message_steps (message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
                                    data BLOB NOT NULL);
        INSERT INTO conversations VALUES (1, 'one', 0, 0), (2, 'two', 0, 0);
        INSERT INTO messages VALUES (1, 1, 'user', 'a', 0, NULL, NULL), (2, 2, 'user', 'x', 0, NULL, NULL),
                                    (3, 1, 'assistant', 'b', 0, NULL, NULL), (4, 2, 'assistant', 'y', 0, NULL, NULL),
                                    (5, 1, 'user', 'c', 0, NULL, NULL);
        PRAGMA user_version=3;""")
    old.close()
    store = HistoryStore(path)
    assert [m.content for m in store.messages(1)] == ["a", "b", "c"]
    assert [m.content for m in store.messages(2)] == ["x", "y"]
    assert store._read("PRAGMA user_version")[0][0] == SCHEMA_VERSION  # upgraded through every step
    store.hide_version(4)  # an old answer regenerated
    new = store.add_message(2, "assistant", "z")
    assert [(m.content, m.versions) for m in store.messages(2)] == [("x", ()), ("z", (4, new))]
    store.close()
    assert [m.content for m in HistoryStore(path).messages(1)] == ["a", "b", "c"], "migrated once"


def test_an_unkept_regenerate_shows_the_old_version_again(tmp_path, tokenizer):
    """Stop before a word is written: no new version, and the old answer is back (not a question
    left without its answer)."""
    import threading

    from engine_fixtures import tiny_llama
    from runtime_helpers import runtime_for

    from draftscope.core.session import ChatSession
    from draftscope.engine.engine import Engine

    engine = Engine(tiny_llama(len(tokenizer), seed=7, layers=2, hidden=64), tokenizer, name="tiny")
    store = HistoryStore(tmp_path / "h.sqlite3")
    session = ChatSession(runtime_for(engine, max_new_tokens=8), history=store)
    session.say("hello")
    first = session.run(session.request())
    assert session.rewind() and [t.role for t in session.turns()] == ["user"]
    cancel = threading.Event()
    cancel.set()
    stopped = session.run(session.request(cancel=cancel))
    assert stopped.finish_reason == "cancel" and not stopped.text.strip()
    assert [t.content for t in session.turns()] == ["hello", first.text]
    assert store.messages(session.conversation_id)[1].versions == ()


# ---------------------------------------------------------------- the window


def make_window(qtbot, engine, db, **fields):
    pytest.importorskip("PySide6")
    from runtime_helpers import runtime_for

    from draftscope.gui.main_window import MainWindow

    window = MainWindow(runtime_for(engine, max_new_tokens=12, **fields), HistoryStore(db))
    qtbot.addWidget(window)
    window.show()
    return window


def answer(qtbot, window, act) -> None:
    """Run ``act`` (a send, a regenerate) and wait until the window has handled the answer's end."""
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000):
        act()
    qtbot.waitUntil(lambda: not window.streaming, timeout=5000)


def shown(window, text: str) -> bool:
    """Whether the chat shows ``text`` as its Markdown renders it."""
    from PySide6.QtGui import QTextDocument

    doc = QTextDocument()
    doc.setHtml(window.chat_view.renderer.markdown(text, [], key="check"))
    return doc.toPlainText().strip() in window.chat_view.toPlainText()


def ask(qtbot, window, text: str) -> None:
    window.chat_input.setPlainText(text)
    answer(qtbot, window, window.send)


def test_regenerate_twice_pages_three_versions_and_continues_from_the_shown_one(qtbot, conversation_engine, tmp_path):
    from test_gui_conversations import click_link

    db = tmp_path / "h.sqlite3"
    w = make_window(qtbot, conversation_engine, db, temperature=1.0)
    ask(qtbot, w, "Tell me about caches")
    answer(qtbot, w, w.regenerate)
    answer(qtbot, w, w.regenerate)
    question, last = w.history.messages(w.conversation_id)
    assert len(last.versions) == 3 and last.id == last.versions[-1]
    texts = [w.history.messages(w.conversation_id)[1].content]
    assert "3 / 3" in w.chat_view.toPlainText() and shown(w, texts[0])
    for page in (2, 1):  # back through the versions with the "‹" link
        click_link(qtbot, w.chat_view, "action:version/")
        qtbot.waitUntil(lambda: f"{page} / 3" in w.chat_view.toPlainText(), timeout=5000)  # noqa: B023 - called at once, in this iteration
        texts.insert(0, w.history.messages(w.conversation_id)[1].content)
        assert shown(w, texts[0]) and w.history.messages(w.conversation_id)[1].id == last.versions[page - 1]
        assert w.inspection.answer == last.versions[page - 1], "the panels show the shown version's steps"
    assert len(set(texts)) == 3, "each page shows its own version's text"
    prompts = []
    w.answer_signals.answer_started.connect(lambda: prompts.append(w.session.messages()))
    ask(qtbot, w, "And then?")
    said = [m["content"] for m in prompts[0]]
    assert said[-3:] == ["Tell me about caches", texts[0], "And then?"], "the next question follows version 1"
    w.close()

    again = make_window(qtbot, conversation_engine, db, temperature=1.0)  # a restart keeps the versions and the branch
    again.show_conversation(w.conversation_id)
    assert "1 / 3" in again.chat_view.toPlainText() and "And then?" in again.chat_view.toPlainText()
    click_link(qtbot, again.chat_view, "action:version/")  # "›": version 2, whose branch has no later turn
    qtbot.waitUntil(lambda: "2 / 3" in again.chat_view.toPlainText(), timeout=5000)
    assert shown(again, texts[1]) and "And then?" not in again.chat_view.toPlainText()


def test_at_temperature_0_a_regenerate_says_it_wrote_the_same_text(qtbot, conversation_engine, tmp_path):
    w = make_window(qtbot, conversation_engine, tmp_path / "h.sqlite3", temperature=0.0)
    ask(qtbot, w, "Hello there")
    assert "same text as version" not in w.chat_view.toPlainText()
    answer(qtbot, w, w.regenerate)
    assert len(w.history.messages(w.conversation_id)[1].versions) == 2
    view = w.chat_view.toPlainText()
    assert "2 / 2" in view and "same text as version 1" in view and "raise the temperature in Settings" in view
    if os.environ.get("DRAFTSCOPE_SHOT"):  # a look at it, by hand
        w.chat_view.grab().save(os.environ["DRAFTSCOPE_SHOT"])
