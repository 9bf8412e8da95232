"""Conversations' KV caches kept on disk, so a conversation one comes back to (another in between,
a restart, a server client resuming) is restored instead of read again.

One file per saved cache in paths.kv_cache_dir(): a header (its key, its tokens' count and
checksums), the tokens it holds, then the backend's state of those positions. Safe by
construction: the key is a hash of the model file's fingerprint and of everything that changes
what a cache holds, the tokens are checked against the prompt on load, every file is written to a
temporary name and renamed, and a file that does not check out is ignored (logged) and the prompt
is read as without it.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".kvc"  # a saved cache
INDEX = "index.json"  # what each file holds, for cheap look-ups
TEMP_PREFIX = ".tmp-"  # a file being written (renamed when whole)


def _ours(path: Path) -> bool:
    return path.is_file() and (path.suffix == SUFFIX or path.name == INDEX or path.name.startswith(TEMP_PREFIX))


def disk_use(folder: Path) -> int:
    """Bytes the saved caches in ``folder`` take (the index and unfinished writes included)."""
    if not folder.is_dir():
        return 0
    total = 0
    for path in folder.iterdir():
        try:
            total += path.stat().st_size if _ours(path) else 0
        except OSError:
            pass  # removed meanwhile
    return total


def clear_all(folder: Path) -> int:
    """Remove every saved cache in ``folder`` (and the index); the caches removed."""
    if not folder.is_dir():
        return 0
    removed = 0
    for path in folder.iterdir():
        if not _ours(path):
            continue
        try:
            path.unlink()
        except OSError as exc:
            log.warning("could not remove the saved KV cache %s: %s", path, exc)
            continue
        removed += path.suffix == SUFFIX
    return removed
