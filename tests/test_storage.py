"""Settings and chat history: round trips, fallbacks, and what survives a restart or a crash."""

import json
import sqlite3
import subprocess
import sys

import pytest

from draftscope.storage import HistoryStore, Settings, load_settings, save_settings


def test_settings_round_trip(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(model="/models/x.gguf", temperature=0.7, top_p=0.9, theme="dark", font_size=14,
                 drafters={"retrieval": False, "learned": False, "context": True, "model": False},
                 system_prompt="Be brief.")
    save_settings(s, path)
    back, notices = load_settings(path)
    assert back == s and notices == []
    assert json.loads(path.read_text())["version"] == 1


def test_missing_settings_are_defaults_without_a_notice(tmp_path):
    assert load_settings(tmp_path / "none.json") == (Settings(), [])


@pytest.mark.parametrize("content, words", [
    ("{not json", "could not be read"),
    ("[1, 2]", "could not be read"),
    ('{"version": 99, "theme": "dark"}', "version 99"),
    ('{"theme": "dark"}', "version None"),
])
def test_corrupt_or_foreign_settings_fall_back_with_a_notice(tmp_path, content, words):
    path = tmp_path / "settings.json"
    path.write_text(content)
    settings, notices = load_settings(path)
    assert settings == Settings()
    assert len(notices) == 1 and words in notices[0] and "defaults restored" in notices[0]
    assert (tmp_path / "settings.json.bad").read_text() == content, "the old file is kept"
    assert not path.exists()


def test_bad_fields_fall_back_one_by_one(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "temperature": "hot", "top_p": 7.0, "font_size": 13, "theme": "neon",
                                "drafters": {"retrieval": False, "bogus": True}, "unknown_key": 1}))
    s, notices = load_settings(path)
    assert s.font_size == 13 and s.temperature == 0.0 and s.top_p == 1.0 and s.theme == "system"
    assert s.drafters == {"retrieval": False, "learned": True, "context": True, "model": False}
    assert len(notices) == 3 and any("'temperature'" in n for n in notices) and any("'top_p'" in n for n in notices)


def test_history_survives_reopening(tmp_path):
    db = tmp_path / "history.sqlite3"
    store = HistoryStore(db)
    cid = store.create_conversation("Suffix arrays")
    store.add_message(cid, "user", "What is a suffix array?")
    store.add_message(cid, "assistant", "A sorted array of all suffixes.", stats={"tokens": 9, "tau": 2.25,
                      "tokens_per_second": 31.5, "speedup_estimate": 1.8}, drafters={"retrieval": True})
    store.close()
    again = HistoryStore(db)
    (conv,) = again.conversations()
    assert conv.title == "Suffix arrays"
    msgs = again.messages(cid)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].stats["tau"] == 2.25 and msgs[1].drafters == {"retrieval": True}
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_rename_delete_search_export(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    a = store.create_conversation("Rust questions")
    b = store.create_conversation("Cooking")
    store.add_message(a, "user", "How do lifetimes work?")
    store.add_message(b, "user", "A recipe with 100% rye_flour")
    store.add_message(b, "assistant", "Here is one.", stats={"tokens": 4, "tau": 1.5, "tokens_per_second": 20.0})
    store.rename(a, "Rust lifetimes")
    assert [c.title for c in store.conversations()] == ["Cooking", "Rust lifetimes"]
    assert [c.id for c in store.search("LIFETIMES")] == [a]
    assert [c.id for c in store.search("100%")] == [b] and store.search("rye%flour") == []
    md = store.export_markdown(b)
    assert md.startswith("# Cooking\n") and "## User" in md and "## Assistant" in md and "tau 1.50" in md
    store.delete(b)
    assert [c.id for c in store.conversations()] == [a]
    assert store.messages(b) == []


def test_regenerate_drops_the_answer_and_what_follows(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    c = store.create_conversation()
    store.add_message(c, "user", "one")
    answer = store.add_message(c, "assistant", "first try")
    store.add_message(c, "user", "two")
    store.delete_messages_from(answer)
    assert [m.content for m in store.messages(c)] == ["one"]


def test_a_crash_mid_answer_loses_only_that_answer(tmp_path):
    db = tmp_path / "h.sqlite3"
    script = f"""
import os
from draftscope.storage import HistoryStore
s = HistoryStore({str(db)!r})
c = s.create_conversation("crash")
s.add_message(c, "user", "question")
# the answer is streaming when the process dies: nothing of it is written yet
os._exit(9)
"""
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == 9
    store = HistoryStore(db)
    (conv,) = store.conversations()
    assert [m.content for m in store.messages(conv.id)] == ["question"]


def test_answer_steps_are_kept_and_go_with_their_message(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    conv = store.create_conversation("steps")
    store.add_message(conv, "user", "hi")
    steps = [{"step": i, "token_ids": [i, i + 1], "tree": {"tokens": [5, 6], "parents": [-1, 0]},
              "accepted_path": [0], "pieces": ["a", "b"]} for i in range(300)]
    answer = store.add_message(conv, "assistant", "ab" * 300, steps=steps)
    store.close()
    reopened = HistoryStore(tmp_path / "h.sqlite3")
    assert reopened.steps(answer) == steps
    reopened.delete_messages_from(answer)  # regenerate: the steps go with the answer
    assert reopened.steps(answer) == []
    assert reopened._read("SELECT COUNT(*) AS n FROM message_steps")[0]["n"] == 0


def test_a_version_1_history_is_upgraded_in_place(tmp_path):
    import sqlite3

    path = tmp_path / "h.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
                                    updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id)
                               ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, created REAL NOT NULL,
                               stats TEXT, drafters TEXT);
        INSERT INTO conversations VALUES (1, 'old', 0, 0);
        INSERT INTO messages VALUES (1, 1, 'user', 'kept', 0, NULL, NULL);
        PRAGMA user_version=1;""")
    old.close()
    store = HistoryStore(path)
    assert [m.content for m in store.messages(1)] == ["kept"] and store.steps(1) == []
    answer = store.add_message(1, "assistant", "new", steps=[{"step": 0}])
    assert store.steps(answer) == [{"step": 0}]
