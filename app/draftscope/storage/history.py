"""Chat history in SQLite (WAL journal): conversations and their messages, each answer with its
statistics and the drafter settings it was generated with.

Each answer's decoding steps (the StepEvents as plain dicts: draft trees, accepted paths,
timings) are kept beside it, zlib-compressed JSON, so the inspection panels can replay a stored
answer.

An answer that called tools keeps its calls beside its prose, and each call's result is a message
of its own (role "tool"): their ``tool_fields`` (JSON), what the chat template reads of them and what
the views show (storage/history_schema.py: the schema and how an older file is brought up to it).

Regenerate keeps versions: an answer's versions are the children of the message it answers (each
message names its parent, the message it followed), one of them current. Later turns stay with the
version they followed, so paging back to a version shows its branch again. ``messages`` walks the
current branch only, from the first message: what the model reads, exports and the view show.

Every write is its own transaction, so a crash mid-answer loses at most that answer (the answer
is written when it finishes). A regenerate hides the old version in this store only, and the new
version is written and made current in one transaction: until then the file still shows the old
answer and what followed it, so a crash or kill mid-regenerate reopens on them. One store may be
used from several threads (a lock serialises).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from draftscope import paths
from draftscope.engine.events import STEP_FORMAT
from draftscope.storage.history_markdown import conversation_markdown
from draftscope.storage.history_schema import ROLES, SCHEMA_VERSION, transaction, upgrade

__all__ = ["ROLES", "SCHEMA_VERSION", "Conversation", "HistoryStore", "Message", "encode_steps", "history_path"]


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created: float
    updated: float


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    created: float
    stats: dict | None
    drafters: dict | None
    files: tuple[dict, ...] = ()  # the attachments as the model read them (documents.prompt.SentFile dicts)
    versions: tuple[int, ...] = ()  # an answer's versions' ids, oldest first (this one among them); () if one
    same_as: int = 0  # the first earlier version (1-based) whose text this one repeats; 0: none
    # its part in tool calling: an answer's tool_calls (OpenAI's template shape, arguments an object);
    # a tool result's tool_call_id, name, and ours: server, status, chars (the result's whole size)
    tool_fields: dict = field(default_factory=dict)


def history_path() -> Path:
    return paths.history_file()


def _private_file(path: Path) -> None:
    """The database, created (or tightened) readable by this user only: it holds every chat.
    SQLite gives its -wal and -shm files the database file's permissions."""
    paths.private_folder(path.parent)
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if p.exists() and p.stat().st_mode & 0o077:
                os.chmod(p, 0o600)
    except OSError:
        pass  # sqlite3 reports a file it cannot open, in its own words


class HistoryStore:
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path else history_path()
        _private_file(self.path)
        self._lock = threading.Lock()
        self._hidden: set[int] = set()  # versions a regenerate under way hides (this store only, never the file)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA synchronous=NORMAL")
        upgrade(self._db, self.path)  # an older file's conversations kept, brought to this schema
        self._show_a_version_of_each_answer()

    def _show_a_version_of_each_answer(self) -> None:
        """An answer none of whose versions is current (a regenerate killed mid-answer by a
        Draftscope before this one left the file so) shows its newest again, and what followed it."""
        self._db.execute(
            """UPDATE messages SET current_version = 1 WHERE id IN (SELECT MAX(id) FROM messages
               GROUP BY conversation_id, parent_id HAVING MAX(current_version) = 0)"""
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _transaction(self):
        """One transaction (the caller holds the lock): all of its writes, or none of them."""
        return transaction(self._db)

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ conversations

    def create_conversation(self, title: str = "New conversation") -> int:
        now = time.time()
        return self._write(
            "INSERT INTO conversations (title, created, updated) VALUES (?, ?, ?)", (title, now, now)
        ).lastrowid

    def rename(self, conversation_id: int, title: str) -> None:
        self._write("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._write("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def conversations(self) -> list[Conversation]:
        """Most recently active first."""
        rows = self._read("SELECT * FROM conversations ORDER BY updated DESC, id DESC")
        return [Conversation(r["id"], r["title"], r["created"], r["updated"]) for r in rows]

    def conversation(self, conversation_id: int) -> Conversation | None:
        rows = self._read("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        return Conversation(rows[0]["id"], rows[0]["title"], rows[0]["created"], rows[0]["updated"]) if rows else None

    def set_documents(self, conversation_id: int, folder: str | None) -> None:
        """The folder of documents a conversation's answers search (None: none)."""
        if folder is None:
            self._write("DELETE FROM conversation_documents WHERE conversation_id = ?", (conversation_id,))
        else:
            self._write(
                "INSERT OR REPLACE INTO conversation_documents (conversation_id, folder) VALUES (?, ?)",
                (conversation_id, folder),
            )

    def documents(self, conversation_id: int) -> str | None:
        rows = self._read("SELECT folder FROM conversation_documents WHERE conversation_id = ?", (conversation_id,))
        return rows[0]["folder"] if rows else None

    # ------------------------------------------------------------------ messages

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        *,
        stats: dict | None = None,
        drafters: dict | None = None,
        steps: list | bytes | None = None,
        files: list[dict] | None = None,
        tool_fields: dict | None = None,
    ) -> int:
        """``steps``: the answer's StepEvents (or their dicts), or :func:`encode_steps` of them (made
        off the UI thread: encoding a long answer's trees takes tens of ms). ``files``: a user
        message's attachments as the model read them (SentFile dicts), kept with it.
        ``tool_fields``: an answer's calls or a tool result's fields (:attr:`Message.tool_fields`). The message
        follows the current branch's last one (after a regenerate's :meth:`hide_version`: a new
        version of that answer)."""
        now = time.time()
        with self._lock:
            with self._transaction():
                branch = self._branch(conversation_id)
                cur = self._insert_message(
                    conversation_id,
                    {
                        "role": role,
                        "content": content,
                        "created": now,
                        "stats": stats,
                        "drafters": drafters,
                        "tool_fields": tool_fields,
                    },
                    branch[-1][0]["id"] if branch else None,
                )
                if steps:
                    blob = steps if isinstance(steps, bytes) else encode_steps(steps)
                    self._db.execute(
                        "INSERT INTO message_steps (message_id, data) VALUES (?, ?)", (cur.lastrowid, blob)
                    )
                self._insert_files(cur.lastrowid, files)
                self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
            self._hidden.discard(cur.lastrowid)  # a deleted hidden message's id, reused by SQLite
        return cur.lastrowid

    def extend_answer(self, message_id: int, content: str, *, stats: dict, drafters: dict, steps) -> None:
        """Continue: an answer written on keeps its message (its place, its versions); its text,
        figures and steps (StepEvents or their dicts, old ones first) become the longer answer's,
        in one transaction."""
        blob = steps if isinstance(steps, bytes) else encode_steps(steps)
        with self._lock, self._transaction():
            self._db.execute(
                "UPDATE messages SET content = ?, stats = ?, drafters = ? WHERE id = ?",
                (content, _json(stats), _json(drafters), message_id),
            )
            self._db.execute(
                "INSERT OR REPLACE INTO message_steps (message_id, data) VALUES (?, ?)", (message_id, blob)
            )
            self._db.execute(
                "UPDATE conversations SET updated = ? WHERE id = (SELECT conversation_id FROM messages WHERE id = ?)",
                (time.time(), message_id),
            )

    def set_tool_fields(self, message_id: int, tool_fields: dict, content: str | None = None) -> None:
        """A kept message's part in tool calling (an answer kept as it streamed becomes its prose,
        ``content``, and its calls); its figures, steps and versions stay."""
        with self._lock, self._transaction():
            self._db.execute(
                "UPDATE messages SET tool_fields = ?, content = COALESCE(?, content) WHERE id = ?",
                (_json(tool_fields or None), content, message_id),
            )
            self._db.execute(
                "UPDATE conversations SET updated = ? WHERE id = (SELECT conversation_id FROM messages WHERE id = ?)",
                (time.time(), message_id),
            )

    def add_conversations(self, conversations) -> list[int]:
        """Conversations read from a file (storage.transfer.Imported), written in one transaction:
        all of them, or none. Returns their ids."""
        ids, added = [], []
        with self._lock:
            with self._transaction():
                for c in conversations:
                    cur = self._db.execute(
                        "INSERT INTO conversations (title, created, updated) VALUES (?, ?, ?)",
                        (c.title, c.created, c.updated),
                    )
                    ids.append(cur.lastrowid)
                    parent = None
                    for m in c.messages:
                        parent = self._insert_message(cur.lastrowid, m, parent).lastrowid
                        self._insert_files(parent, m.get("files"))
                        added.append(parent)
            self._hidden.difference_update(added)  # deleted hidden messages' ids, reused by SQLite
        return ids

    def _insert_message(self, conversation_id: int, m: dict, parent: int | None) -> sqlite3.Cursor:
        """A message following ``parent``, the current one among its versions (lock held, in a transaction)."""
        self._db.execute(
            "UPDATE messages SET current_version = 0 WHERE conversation_id = ? AND parent_id IS ?",
            (conversation_id, parent),
        )
        return self._db.execute(
            "INSERT INTO messages (conversation_id, role, content, created, stats, drafters, parent_id,"
            " current_version, tool_fields) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (
                conversation_id,
                m["role"],
                m["content"],
                m["created"],
                _json(m.get("stats")),
                _json(m.get("drafters")),
                parent,
                _json(m.get("tool_fields") or None),
            ),
        )

    def _insert_files(self, message_id: int, files) -> None:
        for position, f in enumerate(files or ()):
            self._db.execute(
                "INSERT INTO message_files (message_id, position, name, kind, text, tokens, passages) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    message_id,
                    position,
                    f["name"],
                    f.get("kind", "text"),
                    f["text"],
                    int(f.get("tokens", 0)),
                    json.dumps(list(f["passages"])) if f.get("passages") else None,
                ),
            )

    def delete_messages_from(self, message_id: int) -> None:
        """Remove a message and everything that followed it, in every branch (edit-and-resend)."""
        self._write(
            """WITH RECURSIVE later(id) AS (SELECT ? UNION ALL
                   SELECT m.id FROM messages m JOIN later ON m.parent_id = later.id)
               DELETE FROM messages WHERE id IN (SELECT id FROM later)""",
            (message_id,),
        )

    def show_version(self, message_id: int) -> None:
        """Make a version the current one of its answer: its branch is the conversation from now on."""
        with self._lock:
            self._db.execute(  # one statement: one transaction
                """UPDATE messages SET current_version = (id = ?) WHERE (conversation_id, parent_id) IS
                   (SELECT conversation_id, parent_id FROM messages WHERE id = ?)""",
                (message_id, message_id),
            )
            self._hidden.discard(message_id)

    def hide_version(self, message_id: int) -> None:
        """Regenerate: this store's branch ends at the question until the new version is added
        (:meth:`add_message` writes it and makes it current in one transaction; :meth:`show_version`
        puts the old one back if none is). Nothing is written: the file keeps the old version
        current, so a crash or kill before the new one is written loses only the new one."""
        with self._lock:
            self._hidden.add(message_id)

    def has_steps(self, message_id: int) -> bool:
        """Whether an answer kept its decoding steps (an imported one has none to inspect)."""
        return bool(self._read("SELECT 1 FROM message_steps WHERE message_id = ?", (message_id,)))

    def steps(self, message_id: int) -> list[dict]:
        """The decoding steps stored with an answer ([] when none were kept)."""
        rows = self._read("SELECT data FROM message_steps WHERE message_id = ?", (message_id,))
        if not rows:
            return []
        try:
            data = json.loads(zlib.decompress(rows[0]["data"]))
        except (zlib.error, ValueError):  # a damaged row loses the replay, never the message
            return []
        if isinstance(data, dict):  # versioned (format >= 1); before: a bare list
            data = data.get("steps")
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    def messages(self, conversation_id: int) -> list[Message]:
        """The conversation's current branch, first message first; each with its versions."""
        with self._lock:
            branch = self._branch(conversation_id)
        files = self._files(conversation_id)
        out = []
        for r, siblings in branch:
            versions = tuple(s["id"] for s in siblings) if len(siblings) > 1 else ()
            same_as = next(
                (k + 1 for k, s in enumerate(siblings) if s["id"] < r["id"] and s["content"] == r["content"]), 0
            )
            out.append(
                Message(
                    r["id"],
                    r["conversation_id"],
                    r["role"],
                    r["content"],
                    r["created"],
                    _load(r["stats"]),
                    _load(r["drafters"]),
                    tuple(files.get(r["id"], ())),
                    versions,
                    same_as,
                    _load(r["tool_fields"]) or {},
                )
            )
        return out

    def _branch(self, conversation_id: int) -> list[tuple[sqlite3.Row, list[sqlite3.Row]]]:
        """The current branch (lock held): each message with its versions (its parent's children)."""
        children: dict[int | None, list[sqlite3.Row]] = {}
        for r in self._db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)):
            children.setdefault(r["parent_id"], []).append(r)
        branch, parent = [], None
        while (siblings := children.get(parent)) is not None:
            shown = next((s for s in siblings if s["current_version"] and s["id"] not in self._hidden), None)
            if shown is None:  # a regenerate under way: the branch ends at the question
                break
            branch.append((shown, siblings))
            parent = shown["id"]
        return branch

    def _files(self, conversation_id: int) -> dict[int, list[dict]]:
        """Each message's attachments (message id -> SentFile dicts, in the order attached)."""
        rows = self._read(
            """SELECT f.* FROM message_files f JOIN messages m ON m.id = f.message_id
               WHERE m.conversation_id = ? ORDER BY f.message_id, f.position""",
            (conversation_id,),
        )
        out: dict[int, list[dict]] = {}
        for r in rows:
            out.setdefault(r["message_id"], []).append(
                {
                    "name": r["name"],
                    "kind": r["kind"],
                    "text": r["text"],
                    "tokens": r["tokens"],
                    "passages": json.loads(r["passages"]) if r["passages"] else [],
                }
            )
        return out

    def search(self, text: str) -> list[Conversation]:
        """Conversations whose title or any message contains ``text`` (case-insensitive)."""
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._read(
            """SELECT DISTINCT c.* FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id
               WHERE c.title LIKE ? ESCAPE '\\' OR m.content LIKE ? ESCAPE '\\'
               ORDER BY c.updated DESC, c.id DESC""",
            (pattern, pattern),
        )
        return [Conversation(r["id"], r["title"], r["created"], r["updated"]) for r in rows]

    def export_markdown(self, conversation_id: int) -> str:
        conv = self.conversation(conversation_id)
        if conv is None:
            raise KeyError(f"no conversation {conversation_id}")
        return conversation_markdown(conv.title, self.messages(conversation_id))


def encode_steps(steps) -> bytes:
    """Decoding steps as stored: StepEvents or their dicts, as zlib-compressed JSON with the step
    format's version (read back by events.step_from_dict, whatever the version)."""
    plain = [step if isinstance(step, dict) else dataclasses.asdict(step) for step in steps]
    return zlib.compress(json.dumps({"format": STEP_FORMAT, "steps": plain}).encode(), 6)


def _json(value: dict | None) -> str | None:
    return None if value is None else json.dumps(value)


def _load(text: str | None) -> dict | None:
    return None if text is None else json.loads(text)
