"""A folder of the user's documents kept searchable: every readable file under it cut into passages
(documents/passages.py) and indexed in SQLite's FTS5 (bm25, the Porter stemmer) in a file of its
own. ``refresh`` brings the index up to date with the folder — new and changed files (by size and
modification time) read again, removed ones forgotten — and reports its progress; ``search`` gives
the passages that best answer a question within a token budget. The index lives beside the app's
data, never in the user's folder.

A folder may come from anywhere (a cloned repository, an archive), so nothing outside it is read: a
link that leads out of it (to a file or a folder) is skipped and listed in the report, and each file
is checked again once opened, so one swapped for a link meanwhile is not read either. One file that
cannot be read (a link to nothing, a reader's failure) is skipped with its reason, one removed
meanwhile forgotten; the rest is indexed."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat as stat_kind
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from draftscope import paths
from draftscope.documents.extract import MAX_FILE_BYTES, Attachment, AttachmentError, read_bytes
from draftscope.documents.passages import Passage, match_expression, split_passages, within_budget

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache"}
MAX_FILES = 20_000  # a folder past this is indexed in part, and says so
OUTSIDE = "links outside the folder"  # why a link is skipped, as the window and the terminal say it
_GONE = object()  # _index_file's word for a file removed since the folder was walked

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
    skipped: tuple[str, ...] = ()  # links that lead out of the folder (their paths in it): never read


@dataclass(frozen=True)
class Scan:
    """What a walk of the folder found: the files to index (by their paths in the folder), the links
    that lead out of it, and the links that lead nowhere (each with its reason)."""

    files: dict[str, Path]
    skipped: tuple[str, ...]
    problems: tuple[str, ...]


class _LeadsOutside(Exception):
    """The file opened turned out to be outside the folder (a link put in its place since the walk)."""


def said_skipped(report: RefreshReport, names: int = 3) -> str:
    """The links a refresh skipped, in words for the window and the terminal ("" for none)."""
    if not report.skipped:
        return ""
    more = len(report.skipped) - names
    listed = ", ".join(report.skipped[:names]) + (f" and {more:,} more" if more > 0 else "")
    return f"{len(report.skipped):,} skipped, {OUTSIDE} ({listed})"


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

    def _inside(self, real: str | os.PathLike[str]) -> bool:
        """Whether a resolved path is the folder or under it (the folder resolved too: it may be a link)."""
        return Path(real).is_relative_to(os.path.realpath(self.folder))

    def scan(self) -> Scan:
        """The folder's files, hidden ones and tool folders left out. Links to folders are never
        walked into (what one inside leads to is walked under its own name, so a link that loops
        is harmless); a link that leads out of the folder is skipped and listed; a file link inside
        is read."""
        files: dict[str, Path] = {}
        skipped: list[str] = []
        problems: list[str] = []
        for root, dirs, names in os.walk(self.folder):  # followlinks=False: no link to a folder is entered
            here = Path(root)
            for d in [d for d in dirs if (here / d).is_symlink()]:
                dirs.remove(d)
                if not d.startswith(".") and d not in SKIP_DIRS and not self._inside(os.path.realpath(here / d)):
                    skipped.append(str((here / d).relative_to(self.folder)))
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            for path in (here / n for n in sorted(names) if not n.startswith(".")):
                rel = str(path.relative_to(self.folder))
                if path.is_symlink():
                    try:
                        real = os.path.realpath(path, strict=True)
                    except (OSError, RuntimeError):  # dangling, or a loop of links
                        problems.append(f"{rel} is a link to nothing (what it pointed at is gone)")
                        continue
                    if not self._inside(real):
                        skipped.append(rel)
                        continue
                files[rel] = path
                if len(files) >= MAX_FILES:
                    return Scan(files, tuple(skipped), tuple(problems))
        return Scan(files, tuple(skipped), tuple(problems))

    def candidates(self) -> list[Path]:
        """The files a refresh would index (see ``scan``)."""
        return list(self.scan().files.values())

    def refresh(
        self, progress: Callable[[int, int, str], None] | None = None, stop: Callable[[], bool] | None = None
    ) -> RefreshReport:
        """Read what is new or changed, forget what is gone. ``progress(done, total, file name)``;
        ``stop()`` true ends the refresh early (what was read stays). One file that cannot be read
        (or vanishes meanwhile) never stops the rest: it is listed with its reason (or forgotten)."""
        scan = self.scan()
        known = {r[0]: (r[1], r[2]) for r in self._rows("SELECT path, size, mtime FROM files")}
        gone = [rel for rel in known if rel not in scan.files]
        for rel in gone:
            self._forget(rel)
        read, forgotten, problems, skipped = 0, len(gone), list(scan.problems), list(scan.skipped)
        for done, (rel, path) in enumerate(scan.files.items()):
            if stop is not None and stop():
                break
            try:
                stat = path.stat()
            except OSError:  # removed since the walk (or its link broken): as if gone before it
                forgotten += self._forget(rel) if rel in known else 0
                continue
            if known.get(rel) == (stat.st_size, stat.st_mtime):
                continue
            if progress is not None:
                progress(done, len(scan.files), rel)
            outcome = self._index_file(rel, path, stat)
            if outcome is _GONE or outcome == OUTSIDE:
                forgotten += self._forget(rel) if rel in known else 0
                if outcome == OUTSIDE:
                    skipped.append(rel)
                continue
            read += 1
            if outcome:
                problems.append(outcome)
        if progress is not None:
            progress(len(scan.files), len(scan.files), "")
        count = self._rows("SELECT COUNT(*) FROM files WHERE problem IS NULL")[0][0]
        return RefreshReport(count, read, forgotten, tuple(problems), tuple(skipped))

    def _index_file(self, rel: str, path: Path, stat) -> object:
        """Read one file into the index: None, the reason it could not be read (kept, so an unchanged
        file is not tried again), OUTSIDE, or _GONE."""
        try:
            passages, problem = split_passages(rel, self._read_inside(rel, path).text), None
        except (FileNotFoundError, NotADirectoryError):
            return _GONE
        except _LeadsOutside:
            return OUTSIDE
        except AttachmentError as exc:
            passages, problem = [], str(exc)
        except OSError as exc:
            passages, problem = [], f"{rel} could not be read: {exc.strerror or exc}"
        except Exception as exc:  # a reader's failure on one odd file must not stop the folder
            passages, problem = [], f"{rel} could not be read: {type(exc).__name__}: {exc}"
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

    def _read_inside(self, rel: str, path: Path) -> Attachment:
        """One file's text, read from the file opened only once it is known to be inside the folder:
        the check is made on the open file itself, so a file (or a folder on its way) swapped for a
        link since the walk is never read."""
        target = os.path.realpath(path)  # a link inside is read at its target
        if not self._inside(target):
            raise _LeadsOutside
        if not stat_kind.S_ISREG(os.stat(target).st_mode):  # a pipe or a device is never opened
            raise AttachmentError(f"{rel} is not a file")
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        with open(os.open(target, flags), "rb") as f:
            opened = os.fstat(f.fileno())
            # where the opened file lives, looked at after opening: the same file must be at a path inside
            again = os.path.realpath(target)
            now = os.stat(again)
            if not self._inside(again) or (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
                raise _LeadsOutside
            if not stat_kind.S_ISREG(opened.st_mode):
                raise AttachmentError(f"{rel} is not a file")
            data = f.read(MAX_FILE_BYTES + 1)  # one byte past the limit: read_bytes refuses it by name
        return read_bytes(rel, data)

    def _forget(self, rel: str) -> int:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM passages WHERE path = ?", (rel,))
            self._db.execute("DELETE FROM files WHERE path = ?", (rel,))
            self._db.execute("COMMIT")
        return 1

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
    index = FolderIndex(folder, index_path_for(Path(folder).expanduser(), paths.data_dir()))
    return index, index.refresh(progress)


class Watcher:
    """Keeps a folder's index up to date while the app runs: a refresh every ``interval`` seconds on
    a thread of its own (a changed file is read again, a removed one forgotten). A pass that fails
    is said once through ``on_error`` (a log warning without one) and the next pass tries again."""

    def __init__(self, index: FolderIndex, interval: float = 5.0, on_report=None, on_error=None) -> None:
        self.index, self.interval, self.on_report = index, interval, on_report
        self.on_error = on_error or (lambda said: logging.getLogger(__name__).warning("%s", said))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="documents watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last_error = None  # said already: the same failure on every pass is not said again
        while not self._stop.wait(self.interval):
            try:
                report = self.index.refresh(stop=self._stop.is_set)
                if self.on_report is not None and (report.read or report.forgotten):
                    self.on_report(report)
            except Exception as exc:  # a folder gone for a moment, a reader's bug: the watcher must live on
                if self._stop.is_set():
                    return  # the index closed under a pass at shutdown: nothing to say
                said = f"{self.index.folder}: looking for changed documents failed ({type(exc).__name__}: {exc})"
                if said != last_error:
                    self.on_error(said + "; trying again")
                last_error = said
                continue
            last_error = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
