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


def manifest_disagreement(manifest: dict, header: dict) -> str | None:
    """Why ``manifest`` does not describe the index whose header is ``header`` (Reader.info()),
    or None when it does: a build killed between writing the index and writing its manifest
    leaves the previous build's manifest beside the new index."""
    totals = manifest.get("totals")
    tokenizer = manifest.get("tokenizer")
    if not isinstance(totals, dict):
        return "it records no totals"
    differences = []
    for key, label in (("documents", "documents"), ("tokens", "tokens"), ("file_bytes", "file_bytes")):
        if key in totals and totals[key] != header.get(label):
            differences.append(f"{key} {totals[key]!r} against the index's {header.get(label)!r}")
    if isinstance(tokenizer, dict) and tokenizer.get("fingerprint") not in (None, header.get("tokenizer_fingerprint")):
        differences.append("another tokenizer fingerprint")
    return "; ".join(differences) or None
