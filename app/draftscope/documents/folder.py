"""A folder of the user's documents kept searchable: every readable file under it cut into passages
(documents/passages.py) and indexed in SQLite's FTS5 (bm25, the Porter stemmer) in a file of its
own. ``refresh`` brings the index up to date with the folder — new and changed files (by size and
modification time) read again, removed ones forgotten — and reports its progress; ``search`` gives
the passages that best answer a question within a token budget. The index lives beside the app's
data, never in the user's folder."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from draftscope.documents.extract import AttachmentError, read_file
from draftscope.documents.passages import Passage, match_expression, split_passages, within_budget

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache"}
MAX_FILES = 20_000  # a folder past this is indexed in part, and says so

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime REAL, problem TEXT);
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(path UNINDEXED, first UNINDEXED, last UNINDEXED, body,
                                                       tokenize='porter unicode61');
"""


@dataclass(frozen=True)
class RefreshReport:
    files: int  # files indexed now
    read: int  # of them, read in this refresh (new or changed)
    forgotten: int  # removed from the folder since the last refresh
    problems: tuple[str, ...]  # files that could not be read, each with its reason


def index_path_for(folder: Path, data_dir: Path) -> Path:
    """Where a folder's index is kept: one file per folder, named by the folder's path."""
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    return data_dir / "documents" / f"{folder.name or 'folder'}-{key}.sqlite3"


class FolderIndex:
    def __init__(self, folder: str | os.PathLike[str], index_file: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).expanduser()
        if not self.folder.is_dir():
            raise ValueError(f"{self.folder} is not a folder")
        Path(index_file).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(index_file, check_same_thread=False, isolation_level=None)
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def candidates(self) -> list[Path]:
        out = []
        for root, dirs, names in os.walk(self.folder):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            out += [Path(root) / n for n in sorted(names) if not n.startswith(".")]
            if len(out) >= MAX_FILES:
                return out[:MAX_FILES]
        return out

    def refresh(
        self, progress: Callable[[int, int, str], None] | None = None, stop: Callable[[], bool] | None = None
    ) -> RefreshReport:
        """Read what is new or changed, forget what is gone. ``progress(done, total, file name)``;
        ``stop()`` true ends the refresh early (what was read stays)."""
        files = self.candidates()
        known = {r[0]: (r[1], r[2]) for r in self._rows("SELECT path, size, mtime FROM files")}
        present = {str(p.relative_to(self.folder)): p for p in files}
        gone = [p for p in known if p not in present]
        for rel in gone:
            self._forget(rel)
        read, problems = 0, []
        for done, (rel, path) in enumerate(present.items()):
            if stop is not None and stop():
                break
            stat = path.stat()
            if known.get(rel) == (stat.st_size, stat.st_mtime):
                continue
            if progress is not None:
                progress(done, len(present), rel)
            problem = self._index_file(rel, path, stat)
            read += 1
            if problem:
                problems.append(problem)
        if progress is not None:
            progress(len(present), len(present), "")
        count = self._rows("SELECT COUNT(*) FROM files WHERE problem IS NULL")[0][0]
        return RefreshReport(count, read, len(gone), tuple(problems))

    def _index_file(self, rel: str, path: Path, stat) -> str | None:
        try:
            passages = split_passages(rel, read_file(path).text)
            problem = None
        except AttachmentError as exc:
            passages, problem = [], str(exc)
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM passages WHERE path = ?", (rel,))
            self._db.executemany(
                "INSERT INTO passages (path, first, last, body) VALUES (?, ?, ?, ?)",
                [(rel, p.first_line, p.last_line, p.text) for p in passages],
            )
            self._db.execute(
                "INSERT OR REPLACE INTO files (path, size, mtime, problem) VALUES (?, ?, ?, ?)",
                (rel, stat.st_size, stat.st_mtime, problem),
            )
            self._db.execute("COMMIT")
        return problem

    def _forget(self, rel: str) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM passages WHERE path = ?", (rel,))
            self._db.execute("DELETE FROM files WHERE path = ?", (rel,))
            self._db.execute("COMMIT")

    def _rows(self, sql: str, args: tuple = ()) -> list:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def search(
        self, question: str, budget_tokens: int, count_tokens: Callable[[str], int], limit: int = 40
    ) -> list[Passage]:
        """The passages that best answer ``question`` within ``budget_tokens``, best first."""
        match = match_expression(question)
        if match is None:
            return []
        rows = self._rows(
            "SELECT path, first, last, body FROM passages WHERE passages MATCH ? ORDER BY bm25(passages) LIMIT ?",
            (match, limit),
        )
        found = [Passage(path, int(first), int(last), body) for path, first, last, body in rows]
        return within_budget(found, budget_tokens, count_tokens)


def open_folder(
    folder: str | os.PathLike[str], progress: Callable[[int, int, str], None] | None = None
) -> tuple[FolderIndex, RefreshReport]:
    """A folder's index in the app's data folder, brought up to date now."""
    from draftscope import paths

    index = FolderIndex(folder, index_path_for(Path(folder).expanduser(), paths.data_dir()))
    return index, index.refresh(progress)


class Watcher:
    """Keeps a folder's index up to date while the app runs: a refresh every ``interval`` seconds on
    a thread of its own (a changed file is read again, a removed one forgotten)."""

    def __init__(self, index: FolderIndex, interval: float = 5.0, on_report=None) -> None:
        self.index, self.interval, self.on_report = index, interval, on_report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="documents watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                report = self.index.refresh(stop=self._stop.is_set)
            except (OSError, sqlite3.Error):  # a folder gone or unreadable for a moment: try again later
                continue
            if self.on_report is not None and (report.read or report.forgotten):
                self.on_report(report)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
