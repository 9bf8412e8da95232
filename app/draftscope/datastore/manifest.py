"""The manifest beside each index (``NAME.manifest.json``): what went in, with which tokenizer
and options, what was skipped and how long it took. ``draftscope datastore info`` prints it."""

from __future__ import annotations

import json
import os
from pathlib import Path

MANIFEST_FORMAT = "draftscope-datastore-manifest"
MANIFEST_VERSION = 1


def manifest_path(index_path: str | os.PathLike[str]) -> Path:
    p = Path(index_path)
    return p.with_name(p.name + ".manifest.json")


def write_manifest(index_path: Path, data: dict) -> Path:
    path = manifest_path(index_path)
    body = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, **data}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_manifest(index_path: str | os.PathLike[str]) -> dict | None:
    """The manifest of an index, or None when there is none; a damaged one raises ValueError."""
    path = manifest_path(index_path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a readable manifest: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path} is not a Draftscope datastore manifest")
    return data
