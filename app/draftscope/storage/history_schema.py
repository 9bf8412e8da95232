"""The chat history's SQLite schema and the steps that bring an older file up to it
(storage/history.py opens the file and runs them).

Each step checks the file's columns, not its version number, so a step interrupted by a crash (its
one transaction rolled back) simply runs again at the next start, and an old file keeps every
conversation, message, attachment and decoding step it had.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager

SCHEMA_VERSION = 5  # 2: message_steps; 3: message_files, conversation_documents; 4: versions; 5: tool calls

ROLES = ("system", "user", "assistant", "tool")

# The messages table, named so the tool-call step can build the new one beside the old.
_MESSAGES = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content TEXT NOT NULL,
    created REAL NOT NULL,
    stats TEXT,     -- JSON: tokens, tau, tokens/s, time to first token, speedup, ...
    drafters TEXT,  -- JSON: the drafter settings the answer was generated with
    parent_id INTEGER,  -- the message this one followed (NULL: the first); subtrees are deleted by walk
    current_version INTEGER NOT NULL DEFAULT 1,  -- the version shown among its parent's children
    tool_fields TEXT  -- JSON: an answer's tool_calls; a tool result's tool_call_id, name, server, status, chars
);
"""
_MESSAGES_INDEX = "CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);"

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
{_MESSAGES.format(name="messages")}
{_MESSAGES_INDEX}
CREATE TABLE IF NOT EXISTS message_steps (
    message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    data BLOB NOT NULL  -- zlib(JSON list of StepEvent dicts)
);
CREATE TABLE IF NOT EXISTS message_files (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,      -- what the model read of the file: the whole text, or its passages
    tokens INTEGER NOT NULL,
    passages TEXT,           -- JSON list of where the passages came from (NULL: the file whole)
    PRIMARY KEY (message_id, position)
);
CREATE TABLE IF NOT EXISTS conversation_documents (
    conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    folder TEXT NOT NULL     -- a folder of documents the conversation's answers search
);
"""

# The columns every schema since 4 has, copied as they are when the messages table is rebuilt.
_KEPT_COLUMNS = "id, conversation_id, role, content, created, stats, drafters, parent_id, current_version"


@contextmanager
def transaction(db: sqlite3.Connection):
    """One transaction (the caller holds the store's lock): all of its writes, or none of them."""
    db.execute("BEGIN")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def upgrade(db: sqlite3.Connection, path) -> None:
    """Bring the file at ``path`` of any earlier schema up to :data:`SCHEMA_VERSION` (the tables
    made, each step run that the file still needs), then mark it so."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"{path} was written by a newer Draftscope (schema {version})")
    db.executescript(SCHEMA)
    _migrate_versions(db)
    _migrate_tool_calls(db)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _columns(db: sqlite3.Connection) -> set[str]:
    return {r[1] for r in db.execute("PRAGMA table_info(messages)")}


def _migrate_versions(db: sqlite3.Connection) -> None:
    """A file from before versions (schema < 4): each message follows the one before it in its
    conversation, every one current (one transaction: a crash leaves the old file)."""
    if "parent_id" in _columns(db):
        return
    with transaction(db):
        db.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER")
        db.execute("ALTER TABLE messages ADD COLUMN current_version INTEGER NOT NULL DEFAULT 1")
        db.execute("""UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
                      WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id)""")


def _migrate_tool_calls(db: sqlite3.Connection) -> None:
    """A file from before tool calls (schema < 5): the messages table rebuilt with the 'tool' role
    allowed (SQLite cannot change a CHECK in place) and a tool_fields column, every row copied with
    its id, so the steps and files that name a message still name it. SQLite's own recipe for
    changing a table: foreign keys off around one transaction (no row changes its id, so no
    reference can break; one an old file already had dangling stays as it was)."""
    if "tool_fields" in _columns(db):
        return
    db.execute("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction, so set before it
    try:
        with transaction(db):
            db.execute(_MESSAGES.format(name="messages_v5"))
            db.execute(f"INSERT INTO messages_v5 ({_KEPT_COLUMNS}) SELECT {_KEPT_COLUMNS} FROM messages")
            db.execute("DROP TABLE messages")
            db.execute("ALTER TABLE messages_v5 RENAME TO messages")
            db.execute(_MESSAGES_INDEX)
    finally:
        db.execute("PRAGMA foreign_keys=ON")
