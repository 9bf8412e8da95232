"""Conversations' KV caches kept on disk, so a conversation one comes back to (another in between,
a restart, a server client resuming) is restored instead of read again.

One file per saved cache in paths.kv_cache_dir(): a header (its key, its tokens' count and
checksums), the tokens it holds, then the backend's state of those positions. Safe by
construction: the key is a hash of the model file's fingerprint and of everything that changes
what a cache holds (the backend's ``cache_identity``), the tokens are checked against the prompt
on load, every file is written to a temporary name and renamed, and a file that does not check out
is ignored (logged, removed) and the prompt is read as without it.

Look-ups stay cheap: ``index.json`` keeps, per file, its key, its size, when it was last used and
a chained hash of each block of ``BLOCK`` tokens, so finding the longest saved prefix of a prompt
reads no file; only the one chosen is read, and its tokens are compared one by one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from draftscope.paths import private_folder

log = logging.getLogger(__name__)

SUFFIX = ".kvc"  # a saved cache
INDEX = "index.json"  # what each file holds, for cheap look-ups
TEMP_PREFIX = ".tmp-"  # a file being written (renamed when whole)
MAGIC = b"DSKVC001"
BLOCK = 16  # tokens per indexed block: a saved prefix is found to within a block, then compared exactly
MIN_SAVE = 64  # a slot's tail cut away is saved from this many tokens (fewer: reading them again is quick)
MIN_GAIN = 32  # a saved prefix is loaded when it keeps this many tokens more than the slot would
STALE_TEMP_S = 3600.0  # an unfinished write older than this was killed: removed


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


def cache_files(folder: Path) -> list[Path]:
    """The saved caches in ``folder`` (not the index, not unfinished writes)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix == SUFFIX and not p.name.startswith(TEMP_PREFIX))


def identity_key(identity: dict) -> str:
    """The key of caches made under ``identity`` (a backend's cache_identity): equal only for the same
    model file, backend, precision and cache shape."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def block_hashes(tokens) -> list[str]:
    """A chained hash of each whole block of BLOCK tokens: equal hashes up to block k mean equal
    tokens up to (k + 1) * BLOCK."""
    arr = np.asarray(tokens, dtype="<i4")
    out, chain = [], b""
    for at in range(0, len(arr) - BLOCK + 1, BLOCK):
        chain = hashlib.blake2b(chain + arr[at : at + BLOCK].tobytes(), digest_size=8).digest()
        out.append(chain.hex())
    return out


def shared_blocks(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def tokens_hash(tokens) -> str:
    return hashlib.blake2b(np.asarray(tokens, dtype="<i4").tobytes(), digest_size=16).hexdigest()


@dataclass
class Saved:
    """A saved cache read back: the tokens it holds, the positions its state covers, the state."""

    tokens: list[int]
    positions: int
    state: bytes


class CacheFileError(ValueError):
    """A saved cache that does not check out (damaged, truncated, another model's, foreign)."""


def write_cache(path: Path, key: str, tokens: list[int], positions: int, state: bytes) -> None:
    """Write one cache file whole: to a temporary name first, renamed once flushed to disk, so a
    write killed midway leaves no file that loads."""
    arr = np.asarray(tokens, dtype="<i4").tobytes()
    header = json.dumps(
        {
            "key": key,
            "tokens": len(tokens),
            "positions": positions,
            "tokens_crc": zlib.crc32(arr),
            "state_bytes": len(state),
            "state_crc": zlib.crc32(state),
        }
    ).encode()
    temp = path.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex}")
    try:
        with open(temp, "wb", opener=_private) as f:
            f.write(MAGIC + struct.pack("<I", len(header)) + header)
            f.write(arr)
            f.write(state)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def _private(path, flags):
    return os.open(path, flags, 0o600)


def read_header(f, path: Path) -> dict:
    start = f.read(len(MAGIC) + 4)
    if len(start) < len(MAGIC) + 4 or not start.startswith(MAGIC):
        raise CacheFileError(f"{path.name} is not a saved cache (or one of another version)")
    (size,) = struct.unpack("<I", start[len(MAGIC) :])
    if size > 1 << 16:
        raise CacheFileError(f"{path.name}: a damaged header")
    try:
        header = json.loads(f.read(size))
        for field in ("key", "tokens", "positions", "tokens_crc", "state_bytes", "state_crc"):
            int(header[field]) if field != "key" else str(header[field])
    except (ValueError, KeyError, TypeError) as exc:
        raise CacheFileError(f"{path.name}: a damaged header ({exc})") from exc
    header["at"] = len(MAGIC) + 4 + size
    return header


def read_tokens(f, path: Path, header: dict) -> list[int]:
    data = f.read(4 * int(header["tokens"]))
    if len(data) != 4 * int(header["tokens"]) or zlib.crc32(data) != int(header["tokens_crc"]):
        raise CacheFileError(f"{path.name}: its tokens are damaged or cut short")
    return np.frombuffer(data, dtype="<i4").astype(np.int64).tolist()


def read_cache(path: Path, key: str, prompt: list[int], shares: int) -> Saved:
    """The cache in ``path``, checked: its key, its length, both checksums, and its first ``shares``
    tokens equal to the prompt's. Raises CacheFileError (or OSError) where it does not check out."""
    with open(path, "rb") as f:
        header = read_header(f, path)
        if header["key"] != key:
            raise CacheFileError(f"{path.name} was saved for another model or cache shape")
        expected = header["at"] + 4 * int(header["tokens"]) + int(header["state_bytes"])
        if os.fstat(f.fileno()).st_size != expected:
            raise CacheFileError(f"{path.name} is cut short or has bytes after its end")
        tokens = read_tokens(f, path, header)
        if shares > len(tokens) or tokens[:shares] != list(prompt[:shares]):
            raise CacheFileError(f"{path.name} does not hold the tokens its index says")
        if int(header["positions"]) < len(tokens):
            raise CacheFileError(f"{path.name}: its state covers fewer positions than its tokens")
        state = f.read(int(header["state_bytes"]))
        if zlib.crc32(state) != int(header["state_crc"]):
            raise CacheFileError(f"{path.name}: its cache is damaged")
    return Saved(tokens, int(header["positions"]), state)


def _valid_entry(entry) -> bool:
    """An index entry with every field, of its type (a damaged index is rebuilt from the files)."""
    try:
        return (
            isinstance(entry["key"], str)
            and int(entry["tokens"]) >= 0
            and all(isinstance(b, str) for b in entry["blocks"])
            and isinstance(entry["hash"], str)
            and int(entry["bytes"]) >= 0
            and float(entry["used"]) >= 0
        )
    except (KeyError, TypeError, ValueError):
        return False


@dataclass
class Found:
    """A saved cache that shares a prompt's first ``shares`` tokens (at least; to within a block)."""

    path: Path
    shares: int
    tokens: int


class KvDiskStore:
    """The saved caches of one folder, within ``budget`` bytes (the least recently used go first).
    Thread-safe enough for its one caller, a model's stepper thread; several processes may share a
    folder (each write is whole, the index heals from the files it lacks)."""

    def __init__(self, folder: Path, budget: int, *, min_save: int = MIN_SAVE, min_gain: int = MIN_GAIN) -> None:
        self.folder = Path(folder)
        self.budget = int(budget)
        self.min_save, self.min_gain = min_save, min_gain

    # ------------------------------------------------------------------ the index

    def _index(self) -> dict[str, dict]:
        """{file name: {key, tokens, blocks, hash, bytes, used}}, healed: entries whose file is gone
        dropped, files it lacks added from their headers."""
        entries: dict[str, dict] = {}
        try:
            loaded = json.loads((self.folder / INDEX).read_text(encoding="utf-8"))
            entries = {str(k): v for k, v in loaded.get("files", {}).items() if _valid_entry(v)}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("the saved KV caches' index is damaged (%s): rebuilt from the files", exc)
        names = {p.name for p in cache_files(self.folder)}
        entries = {k: v for k, v in entries.items() if k in names}
        for name in names - entries.keys():
            entry = self._entry_from_file(self.folder / name)
            if entry is not None:
                entries[name] = entry
        return entries

    def _entry_from_file(self, path: Path) -> dict | None:
        try:
            with open(path, "rb") as f:
                header = read_header(f, path)
                tokens = read_tokens(f, path, header)
            return self._entry(header["key"], tokens, path.stat().st_size, path.stat().st_mtime)
        except (OSError, CacheFileError) as exc:
            log.warning("saved KV cache %s ignored: %s", path.name, exc)
            return None

    @staticmethod
    def _entry(key: str, tokens: list[int], size: int, used: float) -> dict:
        return {
            "key": key,
            "tokens": len(tokens),
            "blocks": block_hashes(tokens),
            "hash": tokens_hash(tokens),
            "bytes": size,
            "used": used,
        }

    def _write_index(self, entries: dict[str, dict]) -> None:
        temp = self.folder / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
        try:
            with open(temp, "w", encoding="utf-8", opener=_private) as f:
                json.dump({"version": 1, "files": entries}, f)
            os.replace(temp, self.folder / INDEX)
        except OSError as exc:
            log.warning("could not write the saved KV caches' index: %s", exc)
        finally:
            temp.unlink(missing_ok=True)

    # ------------------------------------------------------------------ saving

    def save(self, key: str, tokens: list[int], positions: int, state: bytes) -> Path | None:
        """Keep ``state`` (the cache of ``positions`` positions, holding ``tokens``) under ``key``;
        a saved cache it extends is replaced, and the least recently used go past the budget. None
        where it is already saved or larger than the whole budget."""
        if len(state) + 4 * len(tokens) > self.budget:
            return None
        private_folder(self.folder)
        entries, digest = self._index(), tokens_hash(tokens)
        for entry in entries.values():
            if entry["key"] == key and entry["tokens"] == len(tokens) and entry["hash"] == digest:
                entry["used"] = time.time()  # already saved: it stays longer
                self._write_index(entries)
                return None
        path = self.folder / f"{key[:12]}-{uuid.uuid4().hex[:12]}{SUFFIX}"
        write_cache(path, key, tokens, positions, state)
        for name in [n for n, e in entries.items() if self._extended_by(e, key, tokens)]:
            self._remove(entries, name)  # this one holds all it did and more
        entries[path.name] = self._entry(key, tokens, path.stat().st_size, time.time())
        self._evict(entries, keep=path.name)
        self._write_index(entries)
        return path

    @staticmethod
    def _extended_by(entry: dict, key: str, tokens: list[int]) -> bool:
        n = int(entry["tokens"])
        return entry["key"] == key and n < len(tokens) and entry["hash"] == tokens_hash(tokens[:n])

    def _remove(self, entries: dict[str, dict], name: str) -> None:
        entries.pop(name, None)
        try:
            (self.folder / name).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not remove the saved KV cache %s: %s", name, exc)

    def _evict(self, entries: dict[str, dict], keep: str | None = None) -> None:
        """The least recently used caches removed until the rest fit the budget (and killed writes)."""
        total = sum(int(e["bytes"]) for e in entries.values())
        for name in sorted(entries, key=lambda n: entries[n]["used"]):
            if total <= self.budget:
                break
            if name != keep:
                total -= int(entries[name]["bytes"])
                self._remove(entries, name)
        for temp in self.folder.glob(f"{TEMP_PREFIX}*"):
            try:
                if time.time() - temp.stat().st_mtime > STALE_TEMP_S:
                    temp.unlink()
            except OSError:
                pass

    # ------------------------------------------------------------------ restoring

    def find(self, key: str, prompt: list[int], better_than: int) -> Found | None:
        """The saved cache under ``key`` that shares the most of ``prompt``, where that could keep at
        least ``min_gain`` tokens more than ``better_than``; None if none could. Reads no cache file."""
        wanted = block_hashes(prompt)
        best: Found | None = None
        for name, entry in self._index().items():
            if entry["key"] != key:
                continue
            blocks = shared_blocks(entry["blocks"], wanted)
            most = int(entry["tokens"]) if blocks == len(entry["blocks"]) else (blocks + 1) * BLOCK - 1
            if blocks and min(most, len(prompt) - 1) >= better_than + self.min_gain:
                if best is None or blocks * BLOCK > best.shares:
                    best = Found(self.folder / name, blocks * BLOCK, int(entry["tokens"]))
        return best

    def load(self, found: Found, key: str, prompt: list[int]) -> Saved | None:
        """The cache ``found`` points to, checked against ``key`` and ``prompt``; None (logged, the
        file removed) where it does not check out."""
        try:
            saved = read_cache(found.path, key, prompt, found.shares)
        except (OSError, CacheFileError) as exc:
            log.warning("saved KV cache ignored, the prompt is read instead: %s", exc)
            self.forget(found.path)
            return None
        self.touch(found.path)
        return saved

    def touch(self, path: Path) -> None:
        entries = self._index()
        if path.name in entries:
            entries[path.name]["used"] = time.time()
            self._write_index(entries)

    def forget(self, path: Path) -> None:
        """A saved cache that did not load: removed, with its index entry."""
        entries = self._index()
        self._remove(entries, path.name)
        self._write_index(entries)
