"""What the model learned from its own answers: a per-model datastore of the answers it gave.

Each finished answer's token ids (after the last few prompt tokens, so the chat template's
assistant header leads into it, as in the chat datastores) are appended to a corpus file; an
index of the whole corpus is rebuilt after each answer, in the background (a suffix sort of a
few MB takes milliseconds), and replaces the old one atomically. Drafters open the newest index
when an answer starts. The corpus is the truth: a damaged or missing index is rebuilt from it,
and a damaged corpus keeps every record before the damage.

Files, per model (``key``): ``<dir>/<key>.tokens`` (records: uint32 count, then that many int32
token ids) and ``<dir>/<key>.idx`` (the index).
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from draftscope import paths
from draftscope.models import catalog
from draftscope.retrieval import Reader, Writer

HEADER_TOKENS = 4  # prompt tokens kept before each answer (the assistant header of a chat template)
_COUNT = struct.Struct("<I")
MAX_RECORD = 1 << 24  # tokens; a longer count is damage


def learned_dir() -> Path:
    path = paths.learned_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_key(model: str) -> str:
    """A file name for a model (catalogue name, folder or file)."""
    entry = catalog.find(model)
    name = entry.name if entry is not None else Path(model.rstrip("/")).name or model
    return re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-") or "model"


@dataclass(frozen=True)
class LearnedStats:
    answers: int
    tokens: int
    indexed_answers: int  # answers in the index drafters use now

    def describe(self) -> str:
        if not self.answers:
            return "learned from no answers yet"
        tokens = f"{self.tokens / 1e6:.1f}M" if self.tokens >= 100_000 else f"{self.tokens:,}"
        return f"learned from {self.answers:,} answer{'s' if self.answers != 1 else ''}, {tokens} tokens"

    def brief(self) -> str:
        """Few words, for the status bar."""
        return (
            f"learned: {self.answers:,} answer{'s' if self.answers != 1 else ''}"
            if self.answers
            else "learned: none yet"
        )


class LearnedStore:
    """One model's learned answers. Thread-safe: answers are added from the UI's callback, the
    index is rebuilt on a background thread, drafters read from the decoding thread."""

    def __init__(self, key: str, vocab_size: int, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory else learned_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key = key
        self.vocab_size = int(vocab_size)
        self.corpus = self.directory / f"{key}.tokens"
        self.index = self.directory / f"{key}.idx"
        self._lock = threading.Lock()  # corpus file and counters
        self._build_lock = threading.Lock()  # one rebuild at a time
        self._records, self._tokens, self._valid_bytes = self._scan()
        self._indexed = min(self._indexed_documents(), self._records)
        self.problems: list[str] = []  # what was found damaged and repaired (for the user)

    # ------------------------------------------------------------------ corpus

    def _scan(self) -> tuple[int, int, int]:
        """(records, tokens, bytes) of the corpus's valid prefix."""
        records = tokens = offset = 0
        try:
            data = self.corpus.read_bytes()
        except FileNotFoundError:
            return 0, 0, 0
        while offset + _COUNT.size <= len(data):
            (n,) = _COUNT.unpack_from(data, offset)
            end = offset + _COUNT.size + 4 * n
            if n == 0 or n > MAX_RECORD or end > len(data):
                break
            records, tokens, offset = records + 1, tokens + n, end
        return records, tokens, offset

    def read_answers(self) -> list[np.ndarray]:
        with self._lock:
            data = self.corpus.read_bytes()[: self._valid_bytes] if self.corpus.exists() else b""
        out, offset = [], 0
        while offset < len(data):
            (n,) = _COUNT.unpack_from(data, offset)
            start = offset + _COUNT.size
            out.append(np.frombuffer(data, dtype="<i4", count=n, offset=start).astype(np.int64))
            offset = start + 4 * n
        return out

    def add(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> bool:
        """Append one answer (with the last HEADER_TOKENS prompt tokens). False when there is
        nothing to learn (an empty answer, or ids outside the vocabulary)."""
        record = [int(t) for t in list(prompt_ids)[-HEADER_TOKENS:]] + [int(t) for t in answer_ids]
        if not answer_ids or any(not 0 <= t < self.vocab_size for t in record):
            return False
        blob = _COUNT.pack(len(record)) + np.asarray(record, dtype="<i4").tobytes()
        with self._lock:
            if self.corpus.exists() and self.corpus.stat().st_size != self._valid_bytes:
                # A damaged tail (a crash mid-write): cut it so the new record stays readable.
                with open(self.corpus, "r+b") as f:
                    f.truncate(self._valid_bytes)
                self.problems.append(f"{self.corpus.name}: a damaged record at the end was dropped")
            with open(self.corpus, "ab") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            self._records += 1
            self._tokens += len(record)
            self._valid_bytes += len(blob)
        return True

    # ------------------------------------------------------------------ index

    def _indexed_documents(self) -> int:
        if not self.index.exists():
            return 0
        try:
            reader = Reader(self.index)
            if reader.vocab_size != self.vocab_size:
                return 0
            return reader.document_count
        except Exception:  # damaged or foreign: rebuilt from the corpus
            return 0

    def needs_rebuild(self) -> bool:
        return self._records > 0 and self._indexed != self._records

    def rebuild(self) -> bool:
        """Index the whole corpus (atomically replacing the old index). False if nothing to do."""
        with self._build_lock:
            with self._lock:
                records = self._records
            if records == 0 or records == self._indexed:
                return False
            answers = self.read_answers()[:records]
            writer = Writer(self.index, self.vocab_size)  # written aside, then renamed over the old one
            for tokens in answers:
                writer.add_entry(tokens)
            writer.finalize()
            self._indexed = len(answers)
            return True

    def reader(self):
        """The newest index (None before the first answer is indexed, or when it cannot be read:
        then it is rebuilt in the background by the next answer's ``Learner`` pass)."""
        if not self._indexed or not self.index.exists():
            return None
        try:
            return Reader(self.index)
        except Exception:
            self._indexed = 0
            return None

    # ------------------------------------------------------------------ the user's view

    def stats(self) -> LearnedStats:
        with self._lock:
            return LearnedStats(self._records, self._tokens, self._indexed)

    def clear(self) -> None:
        with self._build_lock, self._lock:
            self.corpus.unlink(missing_ok=True)
            self.index.unlink(missing_ok=True)
            self._records = self._tokens = self._valid_bytes = self._indexed = 0


class Learner:
    """Adds answers and rebuilds the index on one background thread, never the caller's:
    ``submit`` returns at once; ``on_change(stats)`` is called (on the background thread) after
    each rebuild or clear."""

    def __init__(self, store: LearnedStore, on_change: Callable[[LearnedStats], None] | None = None) -> None:
        self.store = store
        self.on_change = on_change
        self._jobs: list[Callable[[], None]] = []
        self._wake = threading.Condition()
        self._closed = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="draftscope-learner", daemon=True)
        self._thread.start()
        if store.needs_rebuild():  # a damaged or missing index from last time: rebuilt from the corpus
            self._post(lambda: None)

    def submit(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> None:
        prompt, answer = list(prompt_ids), list(answer_ids)
        self._post(lambda: self.store.add(prompt, answer))

    def clear(self) -> None:
        self._post(self.store.clear)

    def _post(self, job: Callable[[], None]) -> None:
        with self._wake:
            self._jobs.append(job)
            self._wake.notify()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """For tests and shutdown: True once every submitted job is done."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._jobs and not self._busy, timeout)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()

    def _run(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._jobs or self._closed)
                if self._closed and not self._jobs:
                    return
                jobs, self._jobs = self._jobs, []
                self._busy = True
            try:
                for job in jobs:
                    job()
                self.store.rebuild()
            except Exception as exc:  # learning is a nicety: never take the app down
                self.store.problems.append(f"learning from answers failed: {exc}")
            finally:
                if self.on_change is not None:
                    try:
                        self.on_change(self.store.stats())
                    except Exception:
                        pass
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()
