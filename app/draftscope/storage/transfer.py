"""Conversations in and out: the app's own JSON (messages, the files as the model read them, each
answer's statistics and seed) and Markdown out; the app's JSON and ChatGPT's ``conversations.json``
export in. A file is read and checked whole before anything is written, and written in one
transaction: a damaged, truncated or foreign file imports nothing. A conversation already in the
history (the same messages) is not imported twice."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "draftscope-conversations"
VERSION = 1
ROLES = ("system", "user", "assistant")


class ImportError_(ValueError):
    """Why a file cannot be imported, in words for the user (nothing was imported)."""


@dataclass
class Imported:
    """A conversation read from a file, ready to be written."""

    title: str
    created: float
    updated: float
    messages: list[dict] = field(default_factory=list)  # role, content, created, stats, drafters, files


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
        messages = [
            {
                "role": m.role,
                "content": m.content,
                "created": m.created,
                "stats": m.stats,
                "drafters": m.drafters,
                "files": list(m.files),
            }
            for m in store.messages(c.id)
        ]
        out.append({"title": c.title, "created": c.created, "updated": c.updated, "messages": messages})
    return {"format": FORMAT, "version": VERSION, "conversations": out}


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
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise ImportError_(f"{path.name} could not be read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportError_(f"{path.name} is not a complete JSON file ({exc}): nothing was imported") from exc
    source, conversations = parse_export(data, path.name)
    known = {fingerprint([(m.role, m.content) for m in store.messages(c.id)]) for c in store.conversations()}
    fresh = []
    for conv in conversations:
        key = fingerprint([(m["role"], m["content"]) for m in conv.messages])
        if key not in known:
            known.add(key)
            fresh.append(conv)
    store.add_conversations(fresh)
    return ImportReport(len(fresh), len(conversations) - len(fresh), source)


def fingerprint(pairs) -> str:
    return hashlib.sha256(json.dumps(list(pairs), ensure_ascii=False).encode()).hexdigest()


def parse_export(data, name: str) -> tuple[str, list[Imported]]:
    """(which app wrote it, its conversations), or ImportError_ naming what is wrong."""
    if isinstance(data, dict) and data.get("format") == FORMAT:
        if not isinstance(data.get("version"), int) or data["version"] > VERSION:
            raise ImportError_(f"{name} was written by a newer Draftscope (format version {data.get('version')!r})")
        return "Draftscope", [
            _ours(c, f"{name}: conversation {i + 1}")
            for i, c in enumerate(_list(data.get("conversations"), f"{name}: 'conversations'"))
        ]
    if isinstance(data, list) and all(isinstance(c, dict) and "mapping" in c for c in data):
        return "ChatGPT", [
            c for c in (_chatgpt(c, f"{name}: conversation {i + 1}") for i, c in enumerate(data)) if c.messages
        ]
    raise ImportError_(f"{name} is neither a Draftscope export nor ChatGPT's conversations.json: nothing was imported")


def _list(value, where: str) -> list:
    if not isinstance(value, list):
        raise ImportError_(f"{where} must be a list")
    return value


def _number(value, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _ours(c, where: str) -> Imported:
    if not isinstance(c, dict) or not isinstance(c.get("title"), str):
        raise ImportError_(f"{where} has no title")
    messages = []
    for j, m in enumerate(_list(c.get("messages"), f"{where}: 'messages'")):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ImportError_(f"{where}, message {j + 1}: needs a role ({', '.join(ROLES)}) and text content")
        files = _list(m.get("files") or [], f"{where}, message {j + 1}: 'files'")
        if not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("text"), str) for f in files
        ):
            raise ImportError_(f"{where}, message {j + 1}: each file needs a name and its text")
        messages.append(
            {
                "role": m["role"],
                "content": m["content"],
                "created": _number(m.get("created"), 0.0),
                "stats": m.get("stats") if isinstance(m.get("stats"), dict) else None,
                "drafters": m.get("drafters") if isinstance(m.get("drafters"), dict) else None,
                "files": [_file(f) for f in files],
            }
        )
    created = _number(c.get("created"), 0.0)
    return Imported(c["title"], created, _number(c.get("updated"), created), messages)


def _file(f: dict) -> dict:
    passages = f.get("passages") if isinstance(f.get("passages"), list) else []
    return {
        "name": f["name"],
        "text": f["text"],
        "kind": f.get("kind") if isinstance(f.get("kind"), str) else "text",
        "tokens": int(_number(f.get("tokens"), 0)),
        "passages": [str(p) for p in passages],
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
        chain.append(mapping[node])
        node = mapping[node].get("parent") if isinstance(mapping[node], dict) else None
    messages = [m for m in (_chatgpt_message(n) for n in reversed(chain)) if m is not None]
    created = _number(c.get("create_time"), 0.0)
    title = c.get("title") if isinstance(c.get("title"), str) and c.get("title") else "ChatGPT conversation"
    return Imported(title, created, _number(c.get("update_time"), created), messages)


def _last_leaf(mapping: dict) -> str | None:
    leaves = [k for k, v in mapping.items() if isinstance(v, dict) and not v.get("children")]
    return leaves[-1] if leaves else None


def _chatgpt_message(node) -> dict | None:
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    role = (message.get("author") or {}).get("role")
    content = message.get("content") or {}
    parts = content.get("parts") if isinstance(content, dict) else None
    text = "\n".join(p for p in parts if isinstance(p, str)).strip() if isinstance(parts, list) else ""
    if role not in ("user", "assistant") or not text:
        return None  # system prompts, tool calls, images: not a turn of the conversation's text
    return {
        "role": role,
        "content": text,
        "created": _number(message.get("create_time"), 0.0),
        "stats": None,
        "drafters": None,
        "files": [],
    }
