"""Settings and chat history: round trips, fallbacks, and what survives a restart or a crash."""

import json
import sqlite3
import subprocess
import sys

import pytest

from draftscope.storage import HistoryStore, Settings, load_settings, save_settings
from draftscope.storage.settings_file import SETTINGS_VERSION


def test_settings_round_trip(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(
        model="/models/x.gguf",
        temperature=0.7,
        top_p=0.9,
        theme="dark",
        font_size=14,
        drafters={"retrieval": False, "learned": False, "context": True, "model": False, "recurrent": False},
        system_prompt="Be brief.",
    )
    save_settings(s, path)
    back, notices = load_settings(path)
    assert back == s and notices == []
    saved = json.loads(path.read_text())
    assert saved["version"] == SETTINGS_VERSION
    assert saved["sampling"]["temperature"] == 0.7 and saved["appearance"]["theme"] == "dark"
    assert saved["model"]["model"] == "/models/x.gguf" and "temperature" not in saved


# A settings file as every Draftscope before sections wrote it (version 1, every setting at the top).
TODAYS_FLAT_FILE = {
    "version": 1,
    "model": "/models/x.gguf",
    "datastore": "/data/chat.idx",
    "drafters": {"retrieval": False, "learned": True, "context": True, "model": True, "recurrent": False},
    "draft_model": "/models/small.gguf",
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 40,
    "max_new_tokens": 300,
    "repetition_penalty": 1.1,
    "seed": 7,
    "system_prompt": "Be brief.",
    "prompt_presets": {"Mine": "Be kind."},
    "context_length": 8192,
    "device": "cpu",
    "dtype": "float32",
    "backend": "llama.cpp",
    "workers": "10.0.0.2:50052",
    "recent_models": ["/models/x.gguf", "default"],
    "threads": 3,
    "theme": "dark",
    "font_size": 13,
    "server_enabled": True,
    "server_port": 9000,
    "server_api_key": "k",
    "server_keep_history": False,
    "server_parallel": 2,
}


def test_a_flat_settings_file_of_today_is_read_whole_and_saved_in_sections(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(TODAYS_FLAT_FILE))
    settings, notices = load_settings(path)
    assert notices == []
    flat = {k: v for k, v in TODAYS_FLAT_FILE.items() if k != "version"}
    assert {name: getattr(settings, name) for name in flat} == flat, "no setting lost"
    save_settings(settings, path)
    saved = json.loads(path.read_text())
    assert (
        saved["version"] == SETTINGS_VERSION
        and saved["server"]["server_port"] == 9000
        and saved["model"]["threads"] == 3
    )
    assert load_settings(path) == (settings, [])


def test_a_setting_is_read_from_its_own_section_only(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {
                "version": 2,
                "sampling": {"temperature": 0.5, "theme": "dark"},
                "appearance": "not an object",
                "model": {"threads": 2},
            }
        )
    )
    settings, notices = load_settings(path)
    assert settings.temperature == 0.5 and settings.threads == 2
    assert settings.theme == "system", "a theme filed under sampling is not the appearance's"


def test_missing_settings_are_defaults_without_a_notice(tmp_path):
    assert load_settings(tmp_path / "none.json") == (Settings(), [])


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "could not be read"),
        ("[1, 2]", "could not be read"),
        ('{"version": 99, "theme": "dark"}', "version 99"),
        ('{"theme": "dark"}', "version None"),
    ],
)
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
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "temperature": "hot",
                "top_p": 7.0,
                "font_size": 13,
                "theme": "neon",
                "drafters": {"retrieval": False, "bogus": True},
                "unknown_key": 1,
            }
        )
    )
    s, notices = load_settings(path)
    default = Settings()
    assert s.font_size == 13 and s.theme == "system"
    assert (s.temperature, s.top_p) == (default.temperature, default.top_p)  # the bad values fell back
    assert s.drafters == {"retrieval": False, "learned": True, "context": True, "model": False, "recurrent": True}
    assert len(notices) == 3 and any("'temperature'" in n for n in notices) and any("'top_p'" in n for n in notices)


def test_hostile_settings_files_fall_back_with_notices_never_raise(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("[" * 100_000 + "]" * 100_000)  # past json's recursion limit
    settings, notices = load_settings(path)
    assert settings == Settings() and len(notices) == 1 and "nested too deeply" in notices[0]
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "drafters": {"retrieval": "yes", "context": False},
                "top_k": 10**400,
                "system_prompt": "x" * 200_000,
                "repetition_penalty": float("inf"),
                "model": "m" * 5000,
            }
        )
    )
    settings, notices = load_settings(path)
    assert settings.drafters["retrieval"] is True and settings.drafters["context"] is False
    assert any("'drafters.retrieval'" in n and "'yes'" in n for n in notices), notices
    assert settings.top_k == Settings().top_k and any("'top_k'" in n for n in notices)
    assert settings.system_prompt == "" and any("'system_prompt'" in n for n in notices)
    assert settings.repetition_penalty == Settings().repetition_penalty and settings.model == "default"
    path.write_bytes(b" " * (2 << 20))
    settings, notices = load_settings(path)
    assert settings == Settings() and "too large" in notices[0]


def test_settings_and_history_are_private_to_the_user(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = save_settings(Settings(), tmp_path / "cfg" / "settings.json")
        db = tmp_path / "data" / "history.sqlite3"
        store = HistoryStore(db)
        store.create_conversation("private")
        open_folder = tmp_path / "open"
        open_folder.mkdir(mode=0o755)
        (open_folder / "history.sqlite3").touch(mode=0o644)
        HistoryStore(open_folder / "history.sqlite3").close()
    finally:
        os.umask(old)
    for f in (path, db, open_folder / "history.sqlite3"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    for d in (path.parent, db.parent, open_folder):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or stat.S_IMODE(wal.stat().st_mode) == 0o600


def test_history_survives_reopening(tmp_path):
    db = tmp_path / "history.sqlite3"
    store = HistoryStore(db)
    cid = store.create_conversation("Suffix arrays")
    store.add_message(cid, "user", "What is a suffix array?")
    store.add_message(
        cid,
        "assistant",
        "A sorted array of all suffixes.",
        stats={"tokens": 9, "tau": 2.25, "tokens_per_second": 31.5, "speedup_estimate": 1.8},
        drafters={"retrieval": True},
    )
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


def test_edit_and_resend_drops_the_message_and_what_follows(tmp_path):
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


WRITER = """
import sys
from draftscope.storage import HistoryStore
s = HistoryStore(sys.argv[1])
c = s.conversations()[0].id if s.conversations() else s.create_conversation("kills")
print("ready", flush=True)
i = 0
while True:  # answers with thousands of steps each, until killed
    i += 1
    n = 1500 + (i * 37) % 1000
    steps = [{"step": k, "token_ids": [k, k + 1, k + 2], "tree": {"tokens": list(range(24)), "parents": [-1] + list(range(23))},
              "accepted_path": [0, 1], "pieces": ["ab", "cd", "ef"]} for k in range(n)]
    s.add_message(c, "user", f"question {i}")
    s.add_message(c, "assistant", "x" * n, stats={"steps": n}, steps=steps)
    print("wrote", flush=True)
"""


def test_kills_while_answers_and_their_steps_are_written_leave_only_whole_answers(tmp_path):
    import random
    import signal
    import time

    db = tmp_path / "h.sqlite3"
    rng = random.Random(0)
    answers_seen = 0
    for kill in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        # one whole answer in whatever the machine's speed, then a kill most likely mid-write
        assert proc.stdout.readline().strip() == "wrote"
        time.sleep(rng.random() * 0.7)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        store = HistoryStore(db)
        assert store._read("PRAGMA integrity_check")[0][0] == "ok"
        (conv,) = store.conversations()
        messages = store.messages(conv.id)
        answers = [m for m in messages if m.role == "assistant"]
        assert len(answers) > answers_seen, f"kill {kill}: no answer was written before it"
        answers_seen = len(answers)
        for m in answers:  # every answer that exists is whole: its text, stats and all its steps
            n = m.stats["steps"]
            assert len(m.content) == n and len(store.steps(m.id)) == n
        store.close()


def test_answer_steps_are_kept_and_go_with_their_message(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    conv = store.create_conversation("steps")
    store.add_message(conv, "user", "hi")
    steps = [
        {
            "step": i,
            "token_ids": [i, i + 1],
            "tree": {"tokens": [5, 6], "parents": [-1, 0]},
            "accepted_path": [0],
            "pieces": ["a", "b"],
        }
        for i in range(300)
    ]
    answer = store.add_message(conv, "assistant", "ab" * 300, steps=steps)
    store.close()
    reopened = HistoryStore(tmp_path / "h.sqlite3")
    assert reopened.steps(answer) == steps
    reopened.delete_messages_from(answer)  # edit-and-resend: the steps go with the answer
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


def test_the_suite_keeps_out_of_the_users_folders():
    """conftest points config, data and cache at temporary / repository-local folders."""
    import tempfile
    from pathlib import Path

    from draftscope.paths import cache_dir, config_dir, data_dir

    tmp = Path(tempfile.gettempdir()).resolve()
    assert tmp in config_dir().resolve().parents and tmp in data_dir().resolve().parents
    assert ".test-cache" in cache_dir().parts


def test_steps_stored_by_any_version_replay(tmp_path):
    """Old answers stay inspectable: a bare list (before the format was versioned), fields this
    version does not know, fields it expects that are missing."""
    import zlib

    from draftscope.engine.events import StepEvent, step_from_dict

    store = HistoryStore(tmp_path / "h.sqlite3")
    conv = store.create_conversation("old")
    store.add_message(conv, "user", "hi")
    old = [
        {
            "step": 1,
            "token_ids": [5, 6],
            "pieces": ["a", "b"],
            "tree": {"tokens": [6], "parents": [-1]},
            "accepted_path": [0],
            "future_field": {"x": 1},
        }
    ]
    answer = store.add_message(conv, "assistant", "ab", steps=zlib.compress(json.dumps(old).encode()))
    (raw,) = store.steps(answer)
    ev = step_from_dict(raw)
    assert isinstance(ev, StepEvent) and ev.token_ids == [5, 6] and ev.pieces == ["a", "b"]
    assert ev.provenance == ["target", "target"] and ev.accepted_path == [0] and ev.speedup_estimate is None
    assert ev.tree.tokens == [6] and ev.tree.parents == [-1] and ev.tree.source == [] and len(ev.tree) == 1
    new = store.add_message(conv, "assistant", "ab", steps=[ev])
    assert step_from_dict(store.steps(new)[0]) == ev
