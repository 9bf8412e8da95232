"""The history keeps tool calls: an answer's calls beside its prose, each result a "tool" message
with its call's id, its tool, its server, how it went and its whole size. They survive a restart
(a new store on the same file), an answer kept as it streamed becomes its prose and its calls with
its figures and steps, a schema-4 file opens with everything it had, the app's JSON export carries
them back in, a malformed one imports nothing and names the message and field, and the Markdown
export shows each call and each result."""

from __future__ import annotations

import json
import sqlite3

import pytest
from history_fixtures import filled

from draftscope.storage import HistoryStore
from draftscope.storage.transfer import ImportError_, export_json, import_file, write_export

CALL = {"id": "call_1", "type": "function", "function": {"name": "read_note", "arguments": {"name": "lisbon"}}}
NOTE = "\n".join(f"line {i} of the note" for i in range(1, 21))
RESULT = {
    "tool_call_id": "call_1",
    "name": "read_note",
    "server": "files",
    "status": "ok",
    "chars": 5000,
    "seconds": 0.25,
}


def conversation_with_a_call(store: HistoryStore) -> int:
    """A question, an answer that called read_note, the tool's result, and the final answer."""
    c = store.create_conversation("Notes")
    store.add_message(c, "user", "What does my Lisbon note say?")
    store.add_message(
        c, "assistant", "Let me look.", stats={"tokens": 12}, steps=[{"step": 0}], tool_fields={"tool_calls": [CALL]}
    )
    store.add_message(c, "tool", NOTE, tool_fields=RESULT)
    store.add_message(c, "assistant", "It lists twenty lines.")
    return c


def test_calls_and_results_come_back_after_a_restart(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    c = conversation_with_a_call(store)
    store.close()
    reopened = HistoryStore(tmp_path / "h.sqlite3")
    question, answer, result, final = reopened.messages(c)
    assert question.tool_fields == {} and final.tool_fields == {}
    assert answer.tool_fields == {"tool_calls": [CALL]} and answer.content == "Let me look."
    assert (result.role, result.content, result.tool_fields) == ("tool", NOTE, RESULT)
    assert reopened.steps(answer.id) == [{"step": 0}]
    assert [c.title for c in reopened.search("line 17 of the note")] == ["Notes"], "a result is searched"


def test_an_answer_kept_as_it_streamed_becomes_its_prose_and_calls(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    c = store.create_conversation("Streamed")
    store.add_message(c, "user", "Add 2 and 3")
    streamed = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    answer = store.add_message(c, "assistant", "Adding. " + streamed, stats={"tokens": 30}, steps=[{"step": 1}])
    call = {"id": "call_9", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    store.set_tool_fields(answer, {"tool_calls": [call]}, content="Adding.")
    (kept,) = [m for m in store.messages(c) if m.id == answer]
    assert (kept.content, kept.tool_fields["tool_calls"]) == ("Adding.", [call])
    assert kept.stats == {"tokens": 30} and store.steps(answer) == [{"step": 1}], "its figures and steps stay"
    store.set_tool_fields(answer, {})
    assert store.messages(c)[-1].tool_fields == {} and store.messages(c)[-1].content == "Adding."


def test_a_role_the_history_does_not_know_is_still_refused(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    c = store.create_conversation("Roles")
    with pytest.raises(sqlite3.IntegrityError):
        store.add_message(c, "narrator", "Once upon a time")
    assert store.messages(c) == []


# The schema 4 tables as Draftscope wrote them before tool calls (messages: no 'tool' role, no tool_fields).
SCHEMA_4 = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL, created REAL NOT NULL, stats TEXT, drafters TEXT,
    parent_id INTEGER, current_version INTEGER NOT NULL DEFAULT 1);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE message_steps (message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
                            data BLOB NOT NULL);
CREATE TABLE message_files (message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
    tokens INTEGER NOT NULL, passages TEXT, PRIMARY KEY (message_id, position));
CREATE TABLE conversation_documents (conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id)
    ON DELETE CASCADE, folder TEXT NOT NULL);
INSERT INTO conversations VALUES (1, 'Old chat', 10, 20);
INSERT INTO messages VALUES (1, 1, 'user', 'Name a colour', 11, NULL, NULL, NULL, 1);
INSERT INTO messages VALUES (2, 1, 'assistant', 'Red.', 12, '{"tokens": 2, "seed": 7}', '{"drafters": []}', 1, 0);
INSERT INTO messages VALUES (3, 1, 'assistant', 'Teal.', 13, '{"tokens": 3}', NULL, 1, 1);
INSERT INTO messages VALUES (4, 1, 'user', 'Why?', 14, NULL, NULL, 3, 1);
INSERT INTO message_files VALUES (1, 0, 'palette.md', 'text', 'red, teal', 4, NULL);
INSERT INTO conversation_documents VALUES (1, '/home/me/notes');
PRAGMA user_version=4;
"""


def test_a_schema_4_history_opens_with_everything_it_had(tmp_path):
    import zlib

    path = tmp_path / "h.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(SCHEMA_4)
    old.execute("INSERT INTO message_steps VALUES (3, ?)", (zlib.compress(json.dumps([{"step": 5}]).encode()),))
    old.commit()
    old.close()

    store = HistoryStore(path)
    assert [(c.id, c.title, c.created, c.updated) for c in store.conversations()] == [(1, "Old chat", 10, 20)]
    question, teal, why = store.messages(1)
    assert [m.content for m in (question, teal, why)] == ["Name a colour", "Teal.", "Why?"]
    assert question.files[0]["name"] == "palette.md" and teal.stats == {"tokens": 3}
    assert teal.versions == (2, 3), "Regenerate's versions kept"
    assert store.steps(3) == [{"step": 5}] and store.documents(1) == "/home/me/notes"
    assert all(m.tool_fields == {} for m in store.messages(1))
    store.show_version(2)
    assert [m.content for m in store.messages(1)] == ["Name a colour", "Red."]
    store.add_message(1, "tool", "a result", tool_fields={"tool_call_id": "call_0"})
    store.delete(1)  # the files and steps still belong to their messages
    assert store._read("SELECT COUNT(*) AS n FROM message_files")[0]["n"] == 0
    assert store._read("SELECT COUNT(*) AS n FROM message_steps")[0]["n"] == 0
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 5


def test_the_json_export_carries_the_calls_back_in(tmp_path):
    source = HistoryStore(tmp_path / "a.sqlite3")
    conversation_with_a_call(source)
    assert write_export(source, tmp_path / "all.json") == 1
    plain_answer = export_json(source)["conversations"][0]["messages"][-1]
    assert "tool_fields" not in plain_answer, "a message without calls exports as before"
    target = HistoryStore(tmp_path / "b.sqlite3")
    assert import_file(target, tmp_path / "all.json").added == 1
    (c,) = target.conversations()
    assert [(m.role, m.content, m.tool_fields) for m in target.messages(c.id)] == [
        (m.role, m.content, m.tool_fields) for m in source.messages(source.conversations()[0].id)
    ]
    assert import_file(target, tmp_path / "all.json").duplicates == 1, "the same calls are not imported twice"


def exported_with(message: dict) -> str:
    """The app's JSON of one conversation whose second message is ``message``."""
    messages = [{"role": "user", "content": "Add 2 and 3"}, message]
    conv = {"title": "Sums", "messages": messages}
    return json.dumps({"format": "draftscope-conversations", "version": 1, "conversations": [conv]})


def answer_calling(**function) -> dict:
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 2}, **function}}
    return {"role": "assistant", "content": "", "tool_fields": {"tool_calls": [call]}}


MALFORMED = {
    "fields that are a list": ({"role": "tool", "content": "5", "tool_fields": []}, "'tool_fields' must be an object"),
    "calls on a question": (
        {"role": "user", "content": "x", "tool_fields": {"tool_calls": []}},
        "'tool_calls' belong to an assistant's message",
    ),
    "calls that are an object": (
        {"role": "assistant", "content": "", "tool_fields": {"tool_calls": {"name": "add"}}},
        "'tool_calls' must be a list",
    ),
    "a call without its function": (
        {"role": "assistant", "content": "", "tool_fields": {"tool_calls": [{"id": "c"}]}},
        "call 1 must be",
    ),
    "a tool name 300 long": (answer_calling(name="a" * 300), "call 1: 'name' is 300 characters long"),
    "arguments of 2 MB": (answer_calling(arguments="x" * 2_000_000), "'arguments' are 2,000,000 characters"),
    "arguments that are a number": (answer_calling(arguments=5), "call 1: 'arguments' must be an object"),
    "a result without its call": ({"role": "tool", "content": "5", "tool_fields": {}}, "needs the 'tool_call_id'"),
    "a negative size": (
        {"role": "tool", "content": "5", "tool_fields": {"tool_call_id": "c", "chars": -1}},
        "'tool_fields': 'chars' must be a count",
    ),
    "a negative call time": (
        {"role": "tool", "content": "5", "tool_fields": {"tool_call_id": "c", "seconds": -2}},
        "'tool_fields': 'seconds' must be a time in seconds",
    ),
    "a status that is a number": (
        {"role": "tool", "content": "5", "tool_fields": {"tool_call_id": "c", "status": 3}},
        "'tool_fields': 'status' must be text",
    ),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_tool_fields_import_nothing_and_say_where(tmp_path, name):
    message, words = MALFORMED[name]
    (tmp_path / "in.json").write_text(exported_with(message))
    store = filled(tmp_path / "h.sqlite3")
    before = [(c.title, [m.content for m in store.messages(c.id)]) for c in store.conversations()]
    with pytest.raises(ImportError_) as refused:
        import_file(store, tmp_path / "in.json")
    assert "in.json: conversation 1, message 2" in str(refused.value) and words in str(refused.value)
    assert "nothing was imported" in str(refused.value)
    assert [(c.title, [m.content for m in store.messages(c.id)]) for c in store.conversations()] == before


def test_markdown_shows_each_call_and_each_results_first_lines_and_size(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    c = conversation_with_a_call(store)
    store.add_message(c, "assistant", "", tool_fields={"tool_calls": [{**CALL, "id": "call_2"}]})
    store.add_message(
        c, "tool", "(the user denied this call)", tool_fields={"tool_call_id": "call_2", "status": "denied"}
    )
    markdown = store.export_markdown(c)
    assert '*Calls `read_note` with:*\n\n```json\n{"name": "lisbon"}\n```' in markdown
    assert "## Tool: read_note (files)" in markdown
    assert "line 8 of the note" in markdown and "line 9 of the note" not in markdown, "its first lines"
    assert "*5,000 characters, the first 8 of 20 lines shown*" in markdown, "its whole size"
    assert "*denied*" in markdown and "(the user denied this call)" in markdown
    assert "It lists twenty lines." in markdown
