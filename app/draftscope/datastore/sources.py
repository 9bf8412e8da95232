"""Where datastore text comes from. Each source walks its files and yields Documents (plain
text) or Conversations (rendered later with the model's chat template), logging every record it
cannot use, with its location, instead of failing the build.

Spec strings (CLI and GUI): ``chat:PATH``, ``code:DIR``, ``text:PATH``, ``jsonl:PATH``,
``table:PATH`` (parquet / arrow / feather via pyarrow).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from draftscope.datastore.jsonstream import first_char, iter_json_array, iter_jsonl
from draftscope.datastore.records import Conversation, Document, SkipLog

KINDS = ("chat", "code", "text", "jsonl", "table")

USER_ROLES = {"human", "user"}
ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
SYSTEM_ROLES = {"system"}

CODE_EXTENSIONS = (
    "*.py *.pyi *.c *.h *.cc *.cpp *.cxx *.hpp *.hh *.rs *.go *.java *.kt *.kts *.scala *.js *.jsx *.mjs *.ts *.tsx "
    "*.rb *.php *.cs *.swift *.m *.mm *.lua *.pl *.pm *.r *.jl *.hs *.ml *.mli *.ex *.exs *.erl *.clj *.dart *.zig "
    "*.sh *.bash *.zsh *.fish *.ps1 *.sql *.html *.css *.scss *.vue *.svelte *.toml *.yaml *.yml *.cmake *.proto "
    "*.md *.rst Makefile Dockerfile CMakeLists.txt"
).split()
EXCLUDED_DIRS = {
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    "env",
    ".env",
    "site-packages",
    "build",
    "dist",
    "target",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".idea",
    ".vscode",
    ".eggs",
    ".gradle",
    "out",
    "bin",
    "obj",
}
TEXT_EXTENSIONS = ("*.txt", "*.md", "*.markdown", "*.rst", "*.text")
TABLE_EXTENSIONS = (".parquet", ".arrow", ".feather", ".ipc")

# Long text files become documents of about this many characters, cut at blank lines.
TEXT_CHUNK_CHARS = 64_000


class DatastoreError(Exception):
    """A problem with a source or option that the user has to fix (shown as is)."""


@dataclass
class SourceOptions:
    include: list[str] = field(default_factory=list)  # globs; empty = the kind's defaults
    exclude: list[str] = field(default_factory=list)
    text_field: str = "text"
    max_file_bytes: int = 1 << 20  # code and text files larger than this are skipped


@dataclass
class Source:
    kind: str
    path: Path
    options: SourceOptions = field(default_factory=SourceOptions)
    # Filled while reading, for progress and the manifest.
    bytes_done: list[int] = field(default_factory=lambda: [0])
    items: int = 0

    @classmethod
    def parse(cls, spec: str, options: SourceOptions | None = None) -> Source:
        kind, sep, path = spec.partition(":")
        if not sep or kind not in KINDS:
            raise DatastoreError(f"bad source {spec!r}: write KIND:PATH with KIND one of {', '.join(KINDS)}")
        if not path:
            raise DatastoreError(f"bad source {spec!r}: the path is missing")
        return cls(kind, Path(path).expanduser(), options or SourceOptions())

    @property
    def spec(self) -> str:
        return f"{self.kind}:{self.path}"

    def files(self) -> list[Path]:
        """The files this source will read, checked for existence and readability."""
        if not self.path.exists():
            raise DatastoreError(f"{self.spec}: no such file or folder")
        if not os.access(self.path, os.R_OK):
            raise DatastoreError(f"{self.spec}: permission denied")
        if self.kind == "code":
            if not self.path.is_dir():
                raise DatastoreError(f"{self.spec}: a code source is a folder")
            return list(_walk(self.path, self.options.include or CODE_EXTENSIONS, self.options.exclude))
        if self.path.is_file():
            return [self.path]
        defaults = {
            "chat": ["*.json", "*.jsonl"],
            "text": list(TEXT_EXTENSIONS),
            "jsonl": ["*.jsonl", "*.ndjson"],
            "table": [f"*{e}" for e in TABLE_EXTENSIONS] + ["*.jsonl"],
        }[self.kind]
        return list(_walk(self.path, self.options.include or defaults, self.options.exclude))

    def iter_items(self, files: list[Path], skips: SkipLog) -> Iterator[Document | Conversation]:
        reader = {
            "chat": self._chat,
            "code": self._code,
            "text": self._text,
            "jsonl": self._jsonl,
            "table": self._table,
        }[self.kind]
        done_before = 0
        for path in files:
            progress = [0]
            self.bytes_done = progress
            try:
                for item in reader(path, skips, progress):
                    self.items += 1
                    self.bytes_done = [done_before + progress[0]]
                    yield item
            except PermissionError:
                skips.skip(str(path), "unreadable: permission denied")
            except OSError as exc:
                skips.skip(str(path), f"unreadable: {exc.strerror or exc}")
            done_before += file_size(path)
            self.bytes_done = [done_before]

    # ------------------------------------------------------------------ readers

    def _chat(self, path: Path, skips: SkipLog, progress: list[int]) -> Iterator[Conversation]:
        records = (
            iter_json_array(path, skips, progress) if first_char(path) == "[" else iter_jsonl(path, skips, progress)
        )
        for record, where in records:
            messages = _chat_messages(record, where, skips)
            if messages:
                yield Conversation(tuple(messages), where)

    def _code(self, path: Path, skips: SkipLog, progress: list[int]) -> Iterator[Document]:
        text = _read_small_text(path, self.options.max_file_bytes, skips)
        progress[0] = file_size(path)
        if text is not None and text.strip():
            yield Document(text, str(path))

    def _text(self, path: Path, skips: SkipLog, progress: list[int]) -> Iterator[Document]:
        chunk: list[str] = []
        size = 0
        done = 0
        with open(path, "rb") as f:
            if b"\0" in f.read(8192):  # as code sources do: an executable or image is not text
                skips.skip(str(path), "binary file")
                progress[0] = file_size(path)
                return
            f.seek(0)
            for lineno, raw in enumerate(f, start=1):
                done += len(raw)
                progress[0] = done
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    skips.skip(f"{path}:{lineno}", f"undecodable bytes: not UTF-8 at byte {exc.start}")
                    continue
                chunk.append(line)
                size += len(line)
                if (size >= TEXT_CHUNK_CHARS and not line.strip()) or size >= 4 * TEXT_CHUNK_CHARS:
                    yield Document("".join(chunk), f"{path}:{lineno}")
                    chunk, size = [], 0
        if "".join(chunk).strip():
            yield Document("".join(chunk), str(path))

    def _jsonl(self, path: Path, skips: SkipLog, progress: list[int]) -> Iterator[Document]:
        for record, where in iter_jsonl(path, skips, progress):
            text = _field(record, self.options.text_field, where, skips)
            if text is not None:
                yield Document(text, where)

    def _table(self, path: Path, skips: SkipLog, progress: list[int]) -> Iterator[Document]:
        if path.suffix.lower() in (".jsonl", ".ndjson"):
            yield from self._jsonl(path, skips, progress)
            return
        try:
            import pyarrow.feather
            import pyarrow.ipc  # noqa: F401
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise DatastoreError("reading parquet/arrow files needs pyarrow: pip install pyarrow") from exc
        column = self.options.text_field
        try:
            if path.suffix.lower() == ".parquet":
                pf = pq.ParquetFile(path)
                if column not in pf.schema_arrow.names:
                    skips.skip(
                        str(path), f"missing field: no column {column!r} (columns: {', '.join(pf.schema_arrow.names)})"
                    )
                    return
                batches = pf.iter_batches(columns=[column], batch_size=1024)
                rows_total = pf.metadata.num_rows
            else:
                reader = _open_arrow(path)
                if column not in reader.schema.names:
                    skips.skip(
                        str(path), f"missing field: no column {column!r} (columns: {', '.join(reader.schema.names)})"
                    )
                    return
                batches = (b.select([column]) for b in reader)
                rows_total = None
            row = 0
            total = max(file_size(path), 1)
            for batch in batches:
                for value in batch.column(0).to_pylist():
                    where = f"{path}[row {row}]"
                    row += 1
                    if not isinstance(value, str):
                        skips.skip(where, f"not text: column {column!r} holds {type(value).__name__}")
                    elif value.strip():
                        yield Document(value, where)
                # Bytes are not known per row; report the share of rows read when the count is known.
                if rows_total:
                    progress[0] = int(total * min(1.0, row / rows_total))
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            skips.skip(str(path), f"unreadable table: {exc}")


def _open_arrow(path: Path):
    import pyarrow as pa
    import pyarrow.ipc

    try:
        return _FileBatches(pa.ipc.open_file(path))
    except pa.ArrowInvalid:  # not the file format: try the streaming format
        return pa.ipc.open_stream(path)


class _FileBatches:
    """Iterate an Arrow IPC file's record batches with the stream reader's interface."""

    def __init__(self, reader) -> None:
        self._reader = reader
        self.schema = reader.schema

    def __iter__(self):
        return (self._reader.get_batch(i) for i in range(self._reader.num_record_batches))


def _walk(root: Path, include: list[str], exclude: list[str]) -> Iterator[Path]:
    """Files under ``root`` (sorted, so builds are reproducible) matching ``include`` and not
    ``exclude`` (globs on the file name or the path relative to root), skipping tool folders."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in EXCLUDED_DIRS
            and not d.endswith(".egg-info")
            and not any(fnmatch.fnmatch(str(rel_dir / d), pat) or fnmatch.fnmatch(d, pat) for pat in exclude)
        )
        for name in sorted(filenames):
            rel = str(rel_dir / name)
            if any(fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(rel, pat) for pat in include) and not any(
                fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(rel, pat) for pat in exclude
            ):
                path = Path(dirpath) / name
                if path.is_file():
                    yield path


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_small_text(path: Path, limit: int, skips: SkipLog) -> str | None:
    size = file_size(path)
    if size > limit:
        skips.skip(str(path), f"too large: {size:,} bytes (limit {limit:,})")
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        skips.skip(str(path), "binary file")
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        skips.skip(str(path), f"undecodable bytes: not UTF-8 at byte {exc.start}")
        return None


def _field(record: object, dotted: str, where: str, skips: SkipLog) -> str | None:
    value = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            skips.skip(where, f"missing field: {dotted!r}")
            return None
        value = value[part]
    if not isinstance(value, str):
        skips.skip(where, f"not text: field {dotted!r} holds {type(value).__name__}")
        return None
    return value if value.strip() else None


def _content_text(content: object) -> str | None:
    """OpenAI content: a string, or a list of parts of which the text parts count."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts) and parts:
            return "".join(parts)
    return None


def _chat_messages(record: object, where: str, skips: SkipLog) -> list[dict] | None:
    """ShareGPT ({"conversations": [{"from", "value"}]}) or OpenAI ({"messages": [{"role",
    "content"}]}) as role/content messages with roles system / user / assistant."""
    if not isinstance(record, dict):
        skips.skip(where, f"not a conversation: a JSON {type(record).__name__}")
        return None
    if isinstance(record.get("conversations"), list):
        turns, role_key, text_key = record["conversations"], "from", "value"
    elif isinstance(record.get("messages"), list):
        turns, role_key, text_key = record["messages"], "role", "content"
    else:
        skips.skip(where, "missing field: neither 'conversations' (ShareGPT) nor 'messages' (OpenAI)")
        return None
    messages = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            skips.skip(where, f"malformed turn: turn {i} is not an object")
            return None
        role = str(turn.get(role_key, "")).lower()
        text = _content_text(turn.get(text_key))
        if text is None:
            skips.skip(where, f"malformed turn: turn {i} has no text {text_key!r}")
            return None
        if role in USER_ROLES:
            role = "user"
        elif role in ASSISTANT_ROLES:
            role = "assistant"
        elif role in SYSTEM_ROLES:
            role = "system"
        else:
            skips.skip(where, f"unknown role: turn {i} has role {role!r}")
            return None
        messages.append({"role": role, "content": text})
    if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        skips.skip(where, "no assistant turn: nothing the model would say")
        return None
    return messages
