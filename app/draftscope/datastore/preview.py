"""Previews of datastore sources (Qt-free): the first few records of a source, read within bounds
(records, bytes, skips, seconds; folders listed up to a limit), with the problem named when there
are none; and the names the wizard suggests for a datastore. The wizard shows them; tests and
other faces can use them without Qt."""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from draftscope.datastore.jsonstream import iter_jsonl
from draftscope.datastore.records import Conversation, Document, SkipLog
from draftscope.datastore.sources import CODE_EXTENSIONS, DatastoreError, Source, SourceOptions, _walk, file_size
from draftscope.models.resolve import DEFAULT_MODEL, DEFAULT_MODEL_NAME, ModelNotFoundError, resolve_model

# What a preview reads at most: this many records, bytes, skipped records, seconds; folders are
# listed up to PREVIEW_MAX_FILES files.
PREVIEW_ITEMS = 5
PREVIEW_MAX_BYTES = 4 << 20
PREVIEW_MAX_SKIPS = 50
PREVIEW_SECONDS = 2.0
PREVIEW_MAX_FILES = 10_000
PREVIEW_PATHS = 15
DISTILL_PROMPTS = 200  # prompts the model answers by default when it learns its own style

KIND_LABELS = {"chat": "Chat log", "code": "Code folder", "text": "Text", "jsonl": "JSONL", "table": "Table"}
_JSON_PROBLEMS = ("malformed JSON", "not a JSON array", "incomplete record")


# ------------------------------------------------------------------------ sources (no Qt here)


def parse_source(spec: str | Source, text_field: str | None = None) -> Source:
    """A Source from ``KIND:PATH``; ``jsonl:PATH#field`` and ``table:PATH#field`` name the field
    holding the text (a ``#`` that is part of an existing path stays in the path)."""
    if isinstance(spec, Source):
        return Source(spec.kind, spec.path, spec.options)
    kind, sep, rest = spec.partition(":")
    if kind in ("jsonl", "table") and "#" in rest and text_field is None:
        base, _, name = rest.rpartition("#")
        if name and base and not Path(rest).expanduser().exists():
            spec, text_field = f"{kind}:{base}", name
    options = SourceOptions(text_field=text_field) if text_field else None
    return Source.parse(spec, options)


@dataclass
class SourcePreview:
    """What a bounded read of a source found: ``error`` (None when usable), the preview text and a
    short line for the source list."""

    error: str | None
    text: str
    summary: str
    files: int = 0


def source_name(source: Source) -> str:
    return source.path.name or str(source.path)


def preview_source(
    source: Source,
    *,
    items: int = PREVIEW_ITEMS,
    max_bytes: int = PREVIEW_MAX_BYTES,
    max_skips: int = PREVIEW_MAX_SKIPS,
    seconds: float = PREVIEW_SECONDS,
) -> SourcePreview:
    """Check ``source`` by reading its first ``items`` records (stopping early after ``max_bytes``,
    ``max_skips`` skipped records or ``seconds``); a code folder is listed, not read."""
    name = source_name(source)
    try:
        files, more = _list_files(source)
    except DatastoreError as exc:
        return SourcePreview(without_spec(source, str(exc)), "", "")
    count = f"{len(files):,}{'+' if more else ''}"
    if source.kind == "code":
        return _preview_code(source, files, count)
    if not files:
        return SourcePreview(f"{name}: no matching files in this folder", "", "")
    size = sum(file_size(p) for p in files[:1000])
    where = f"{count} files, " if source.path.is_dir() else ""
    summary = f"{where}{size_words(size)}"

    skips = SkipLog()
    try:
        first = _read_first_records(source, files, skips, _ReadBounds(items, max_bytes, max_skips, seconds))
    except DatastoreError as exc:  # e.g. pyarrow missing for a table
        return SourcePreview(without_spec(source, str(exc)), "", summary)
    if not first.found:
        return SourcePreview(_no_records(source, skips, first.exhausted), "", summary, len(files))
    return SourcePreview(None, _records_text(source, files, summary, first, skips), summary, len(files))


@dataclass(frozen=True)
class _ReadBounds:
    """When a preview stops reading: after this many records, bytes, skipped records or seconds."""

    items: int
    max_bytes: int
    max_skips: int
    seconds: float


@dataclass
class _FirstRecords:
    found: list[Document | Conversation]
    exhausted: bool  # the source ended before a bound was reached


def _read_first_records(source: Source, files: list[Path], skips: SkipLog, bounds: _ReadBounds) -> _FirstRecords:
    found: list[Document | Conversation] = []
    started = time.monotonic()
    reader = source.iter_items(files, skips)
    exhausted = True
    try:
        for item in reader:
            found.append(item)
            if (
                len(found) >= bounds.items
                or source.bytes_done[0] > bounds.max_bytes
                or skips.count >= bounds.max_skips
                or time.monotonic() - started > bounds.seconds
            ):
                exhausted = False
                break
    finally:
        reader.close()
    return _FirstRecords(found, exhausted)


def _records_text(source: Source, files: list[Path], summary: str, first: _FirstRecords, skips: SkipLog) -> str:
    """The preview shown: a heading, each record found, and an example of what was skipped."""
    noun = "conversations" if source.kind == "chat" else "documents"
    head = f"{KIND_LABELS[source.kind]} · {source.path}"
    if source.kind in ("jsonl", "table"):
        head += f" · field “{source.options.text_field}”"
    lines = [head, f"{summary}. The first {len(first.found)} {noun}{'' if first.exhausted else ' (of more)'}:", ""]
    for item in first.found:
        lines.append(f"── {short_location(item.location, files)}")
        lines.append(_conversation_text(item) if isinstance(item, Conversation) else _clip(item.text, 400, 8))
        lines.append("")
    if skips.count:
        example = skips.examples[0]
        lines.append(
            f"{skips.count} record{'s' if skips.count != 1 else ''} skipped so far, e.g. "
            f"{short_location(example['location'], files)}: {example['reason']}"
        )
    return "\n".join(lines).rstrip()


def _list_files(source: Source) -> tuple[list[Path], bool]:
    """The source's files, a folder's listing capped at PREVIEW_MAX_FILES (and whether it was cut)."""
    path = source.path
    if path.is_dir() and os.access(path, os.R_OK | os.X_OK) and source.kind == "code":
        walked = list(
            itertools.islice(
                _walk(path, source.options.include or CODE_EXTENSIONS, source.options.exclude), PREVIEW_MAX_FILES + 1
            )
        )
        return walked[:PREVIEW_MAX_FILES], len(walked) > PREVIEW_MAX_FILES
    files = source.files()  # checks existence, permission and the folder/file kind
    return files, False


def _preview_code(source: Source, files: list[Path], count: str) -> SourcePreview:
    name = source_name(source)
    if not files:
        return SourcePreview(
            f"{name}: no code files in this folder (looked for "
            f"{', '.join(CODE_EXTENSIONS[:6])} and {len(CODE_EXTENSIONS) - 6} more)",
            "",
            "",
        )
    summary = f"{count} files"
    lines = [
        f"{KIND_LABELS['code']} · {source.path}",
        f"{count} matching files; the first {min(len(files), PREVIEW_PATHS)}:",
        "",
    ]
    lines += [str(p.relative_to(source.path)) for p in files[:PREVIEW_PATHS]]
    if len(files) > PREVIEW_PATHS:
        lines.append("…")
    return SourcePreview(None, "\n".join(lines), summary, len(files))


def without_spec(source: Source, message: str) -> str:
    """A pipeline message (``KIND:PATH: problem``) with the file's name instead of the spec."""
    rest = message[len(source.spec) + 1 :].strip() if message.startswith(source.spec + ":") else message
    return f"{source_name(source)}: {rest}"


def _no_records(source: Source, skips: SkipLog, exhausted: bool) -> str:
    name = source_name(source)
    what = {"chat": "conversations", "text": "text", "code": "code"}.get(source.kind, "records")
    if not skips.count:
        return f"{name}: empty, no {what} found" if exhausted else f"{name}: no {what} found in its first part"
    first = skips.examples[0]
    reason = first["reason"]
    kind = reason.split(":", 1)[0]
    if kind in _JSON_PROBLEMS:
        problem = "not valid JSON"
    elif kind == "undecodable bytes":
        problem = "not UTF-8 text"
    elif kind == "unreadable":
        problem = "unreadable"
    elif source.kind == "chat":
        problem = "not a chat log (ShareGPT or OpenAI messages)"
    else:
        problem = f"no usable {what}"
    where = short_location(first["location"], [source.path])
    message = f"{name}: {problem} ({where + ': ' if where != name else ''}{reason})"
    if kind == "missing field" and source.kind == "jsonl":
        keys = _first_record_keys(source)
        if keys:
            message += f"; the first record has the fields {', '.join(keys)}"
    return message


def _first_record_keys(source: Source) -> list[str]:
    files = [source.path] if source.path.is_file() else []
    for path in files:
        records = iter_jsonl(path, SkipLog())
        try:
            for record, _ in itertools.islice(records, 20):
                if isinstance(record, dict):
                    return [str(k) for k in list(record)[:12]]
        finally:
            records.close()
    return []


def short_location(location: str, files: Iterable[Path]) -> str:
    """``/a/b/chats.jsonl:3`` -> ``chats.jsonl line 3``; ``…[record 2]`` -> ``chats.json record 2``."""
    for path in files:
        text = str(path)
        if location.startswith(text):
            rest = location[len(text) :]
            name = path.name
            if rest.startswith(":") and rest[1:].isdigit():
                return f"{name} line {rest[1:]}"
            if rest.startswith("[") and rest.endswith("]"):
                return f"{name} {rest[1:-1]}"
            return name + rest
    return Path(location).name or location


def _conversation_text(conv: Conversation) -> str:
    return "\n".join(f"{m['role']}: {_clip(' '.join(m['content'].split()), 160, 1)}" for m in conv.messages[:6]) + (
        f"\n… ({len(conv.messages) - 6} more turns)" if len(conv.messages) > 6 else ""
    )


def _clip(text: str, chars: int, lines: int) -> str:
    kept = text.strip("\n").splitlines()
    out = "\n".join(kept[:lines])
    cut = len(kept) > lines
    if len(out) > chars:
        out, cut = out[:chars].rstrip(), True
    return out + (" …" if cut else "")


def size_words(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} bytes"


def duration_words(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs} s"


def model_display_name(spec: str) -> str:
    """The model's name as the user knows it (no download: the default model is named, not fetched)."""
    if spec == DEFAULT_MODEL:
        return DEFAULT_MODEL_NAME
    try:
        return resolve_model(spec, fetch_default=False).display_name
    except (ModelNotFoundError, OSError, ValueError):
        return spec


_BAD_NAME = re.compile(r"[/\\:*?\"<>|\x00-\x1f]")


def output_file_name(name: str) -> str:
    """The index file name for what the user typed ('' when it cannot be one)."""
    name = name.strip()
    if not name or name.startswith(".") or _BAD_NAME.search(name):
        return ""
    return name if name.endswith(".idx") else name + ".idx"


def suggested_name(sources: list[Source]) -> str:
    if not sources:
        return "my-datastore"
    stem = sources[0].path.stem if sources[0].path.suffix else sources[0].path.name
    stem = re.sub(r"[^\w.-]+", "-", stem).strip("-.") or "datastore"
    return stem if len(sources) == 1 else f"{stem}-and-more"


def distill_name(model_spec: str) -> str:
    """The suggested name of a datastore of ``model_spec``'s own answers."""
    stem = re.sub(r"[^\w.-]+", "-", model_display_name(model_spec)).strip("-.").lower() or "model"
    return f"{stem}-own-answers"
