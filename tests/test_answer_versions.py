"""Regenerate keeps answer versions: the history's branches (real SQLite), a version 3 file
migrated, and the window's "‹ 2 / 3 ›" paging with a tiny real model (offscreen Qt): each
version's text shown, the next question built on the version shown, versions kept across a restart
and the plain word when temperature 0 wrote the same text again."""

import os
import sqlite3

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from draftscope.storage import HistoryStore  # noqa: E402
from draftscope.storage.transfer import export_json  # noqa: E402

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
    assert store._read("PRAGMA user_version")[0][0] == 4
    store.hide_version(4)  # an old answer regenerated
    new = store.add_message(2, "assistant", "z")
    assert [(m.content, m.versions) for m in store.messages(2)] == [("x", ()), ("z", (4, new))]
    store.close()
    assert [m.content for m in HistoryStore(path).messages(1)] == ["a", "b", "c"], "migrated once"


def test_an_unkept_regenerate_shows_the_old_version_again(tmp_path, tokenizer):
    """Stop before a word is written: no new version, and the old answer is back (not a question
    left without its answer)."""
    import threading

    from draftscope.core.session import ChatSession
    from draftscope.engine.engine import Engine
    from engine_fixtures import tiny_llama
    from runtime_helpers import runtime_for

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
