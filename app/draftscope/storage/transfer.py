"""Conversations in and out: the app's own JSON (messages, the files as the model read them, each
answer's statistics and seed, its tool calls and their results) and Markdown out; the app's JSON and ChatGPT's ``conversations.json``
export in. A file is read and checked whole before anything is written (every value by type and range, in
storage/import_check.py), and written in one transaction: a damaged, truncated or foreign file
imports nothing and says what is wrong. A conversation already in the history (the same messages)
is not imported twice."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from draftscope.storage.history_schema import ROLES
from draftscope.storage.import_check import (
    ImportError_,
    figures,
    moment,
    plain,
    sent_file,
    shown,
    text,
    tool_fields,
)

FORMAT = "draftscope-conversations"
VERSION = 1


@dataclass
class Imported:
    """A conversation read from a file, ready to be written."""

    title: str
    created: float
    updated: float
    messages: list[dict] = field(default_factory=list)  # role, content, created, stats, drafters, files, tool_fields


@dataclass(frozen=True)
class ImportReport:
    added: int
    duplicates: int
    source: str  # "Draftscope" or "ChatGPT"

    def words(self) -> str:
        dup = f"; {self.duplicates} already in the history were skipped" if self.duplicates else ""
        return f"Imported {self.added} conversation{'s' * (self.added != 1)} from a {self.source} export{dup}"


# ---------------------------------------------------------------- out


def export_json(store, ids: list[int] | None = None) -> dict:
    """The conversations ``ids`` (default: all) as the app's JSON document: each one's current
    branch, as the chat shows it (the other answer versions Regenerate kept stay out)."""
    chosen = [c for c in store.conversations() if ids is None or c.id in ids]
    out = []
    for c in chosen:
        messages = [_message_out(m) for m in store.messages(c.id)]
        out.append({"title": c.title, "created": c.created, "updated": c.updated, "messages": messages})
    return {"format": FORMAT, "version": VERSION, "conversations": out}


def _message_out(m) -> dict:
    """One message as the app's JSON has it (its tool fields only when it has some)."""
    out = {
        "role": m.role,
        "content": m.content,
        "created": m.created,
        "stats": m.stats,
        "drafters": m.drafters,
        "files": list(m.files),
    }
    if m.tool_fields:
        out["tool_fields"] = m.tool_fields
    return out


def export_markdown(store, ids: list[int] | None = None) -> str:
    """The conversations ``ids`` (default: all) as Markdown: each one's current branch."""
    chosen = [c.id for c in store.conversations() if ids is None or c.id in ids]
    return "\n---\n\n".join(store.export_markdown(i) for i in chosen)


def write_export(store, path: str | Path, ids: list[int] | None = None) -> int:
    """Write the conversations to ``path``: Markdown for .md, else the app's JSON. Returns how many."""
    path = Path(path)
    count = len([c for c in store.conversations() if ids is None or c.id in ids])
    text = (
        export_markdown(store, ids)
        if path.suffix.lower() in (".md", ".markdown")
        else json.dumps(export_json(store, ids), ensure_ascii=False, indent=1)
    )
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return count


# ---------------------------------------------------------------- in


def import_file(store, path: str | Path) -> ImportReport:
    """Import ``path`` (the app's JSON or ChatGPT's export) into ``store``, all or nothing."""
    path = Path(path)
    data = _read_json(path)
    try:
        source, conversations = parse_export(data, path.name)
    except ImportError_ as exc:
        raise ImportError_(f"{exc}: nothing was imported") from exc
    known = {
        fingerprint([_said(m.role, m.content, m.tool_fields) for m in store.messages(c.id)])
        for c in store.conversations()
    }
    fresh = []
    for conv in conversations:
        key = fingerprint([_said(m["role"], m["content"], m.get("tool_fields")) for m in conv.messages])
        if key not in known:
            known.add(key)
            fresh.append(conv)
    store.add_conversations(fresh)
    return ImportReport(len(fresh), len(conversations) - len(fresh), source)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise ImportError_(f"{path.name} could not be read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportError_(f"{path.name} is not a complete JSON file ({exc}): nothing was imported") from exc
    except RecursionError as exc:
        raise ImportError_(
            f"{path.name} is nested too deeply to be a conversations file: nothing was imported"
        ) from exc
    except ValueError as exc:  # a number too long to read (Python's limit on integer digits)
        raise ImportError_(f"{path.name} holds a value that cannot be read ({exc}): nothing was imported") from exc


def _said(role: str, content: str, fields: dict | None) -> tuple:
    """What tells one message from another for duplicates: its role and text, and its tool fields
    when it has some (so a conversation exported before tool calls fingerprints as it did)."""
    return (role, content, fields) if fields else (role, content)


def fingerprint(pairs) -> str:
    return hashlib.sha256(json.dumps(list(pairs), ensure_ascii=False).encode()).hexdigest()


def parse_export(data, name: str) -> tuple[str, list[Imported]]:
    """(which app wrote it, its conversations), or ImportError_ naming what is wrong."""
    if isinstance(data, dict) and data.get("format") == FORMAT:
        if not isinstance(data.get("version"), int) or data["version"] > VERSION:
            raise ImportError_(
                f"{name} was written by a newer Draftscope (format version {shown(data.get('version'))})"
            )
        return "Draftscope", [
            _ours(c, f"{name}: conversation {i + 1}")
            for i, c in enumerate(_list(data.get("conversations"), f"{name}: 'conversations'"))
        ]
    if isinstance(data, list) and all(isinstance(c, dict) and "mapping" in c for c in data):
        return "ChatGPT", [
            c for c in (_chatgpt(c, f"{name}: conversation {i + 1}") for i, c in enumerate(data)) if c.messages
        ]
    raise ImportError_(f"{name} is neither a Draftscope export nor ChatGPT's conversations.json")


def _list(value, where: str) -> list:
    if not isinstance(value, list):
        raise ImportError_(f"{where} must be a list")
    return value


def _ours(c, where: str) -> Imported:
    if not isinstance(c, dict) or not isinstance(c.get("title"), str):
        raise ImportError_(f"{where} has no title")
    messages = [
        _our_message(m, f"{where}, message {j + 1}")
        for j, m in enumerate(_list(c.get("messages"), f"{where}: 'messages'"))
    ]
    created = moment(c.get("created"), f"{where}: 'created'", 0.0)
    return Imported(
        text(c["title"], f"{where}: 'title'"),
        created,
        moment(c.get("updated"), f"{where}: 'updated'", created),
        messages,
    )


def _our_message(m, where: str) -> dict:
    if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
        raise ImportError_(f"{where}: needs a role ({', '.join(ROLES)}) and text content")
    files = _list(m.get("files") or [], f"{where}: 'files'")
    return {
        "role": m["role"],
        "content": text(m["content"], f"{where}: 'content'"),
        "created": moment(m.get("created"), f"{where}: 'created'", 0.0),
        "stats": figures(m.get("stats"), f"{where}: 'stats'"),
        "drafters": plain(m.get("drafters"), f"{where}: 'drafters'"),
        "files": [sent_file(f, f"{where}, file {k + 1}") for k, f in enumerate(files)],
        "tool_fields": tool_fields(m.get("tool_fields"), f"{where}: 'tool_fields'", m["role"]),
    }


def _chatgpt(c: dict, where: str) -> Imported:
    """A ChatGPT conversation: the branch that ends at its current node, text parts only."""
    mapping = c.get("mapping")
    if not isinstance(mapping, dict):
        raise ImportError_(f"{where}: 'mapping' must be an object")
    node = c.get("current_node") or _last_leaf(mapping)
    chain, seen = [], set()
    while isinstance(node, str) and node in mapping and node not in seen:
        seen.add(node)
        chain.append(node)
        node = mapping[node].get("parent") if isinstance(mapping[node], dict) else None
    turns = (_chatgpt_message(mapping[key], f"{where}, node {shown(key)}") for key in reversed(chain))
    messages = [m for m in turns if m is not None]
    created = moment(c.get("create_time"), f"{where}: 'create_time'", 0.0)
    title = c.get("title") if isinstance(c.get("title"), str) and c.get("title") else "ChatGPT conversation"
    updated = moment(c.get("update_time"), f"{where}: 'update_time'", created)
    return Imported(text(title, f"{where}: 'title'"), created, updated, messages)


def _last_leaf(mapping: dict) -> str | None:
    leaves = [k for k, v in mapping.items() if isinstance(v, dict) and not v.get("children")]
    return leaves[-1] if leaves else None


def _chatgpt_message(node, where: str) -> dict | None:
    """A node's text turn (None for what is not one: system prompts, tool calls, images)."""
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    author, content = message.get("author"), message.get("content")
    if author is not None and not isinstance(author, dict):
        raise ImportError_(f"{where}: 'author' must be an object with a role, got {shown(author)}")
    role = author.get("role") if author else None
    parts = content.get("parts") if isinstance(content, dict) else None
    words = "\n".join(p for p in parts if isinstance(p, str)).strip() if isinstance(parts, list) else ""
    if role not in ("user", "assistant") or not words:
        return None
    return {
        "role": role,
        "content": text(words, f"{where}: its text"),
        "created": moment(message.get("create_time"), f"{where}: 'create_time'", 0.0),
        "stats": None,
        "drafters": None,
        "files": [],
    }
