"""A datastore kept open across answers that follows its file on disk.

Users refresh a datastore by rebuilding it (renamed into place) or by copying a new file over the
old one. Before each answer :meth:`LiveReader.current` looks at the file: unchanged, the open
reader is used; changed, the file is opened again (and checked against the model); when that
fails (a copy still under way, a damaged or foreign file) answers draft from the copy opened
before if it is in memory, else without this datastore. Each change is reported once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from draftscope.retrieval.index import Reader


class LiveReader:
    def __init__(self, source: Reader | str | Path, *, check: Callable[[Reader], str | None] | None = None) -> None:
        """``source``: a path or an open Reader. ``check(reader)``: why a reopened file cannot
        draft for this model (None when it can)."""
        self.reader: Reader | None = source if isinstance(source, Reader) else Reader(source)
        self.path = self.reader.path
        self.check = check
        self._reported: str | None = None

    def current(self) -> tuple[Reader | None, str | None]:
        """(the reader to draft from or None, a notice for the user or None)."""
        reader = self.reader
        if reader is not None and reader.disk_state() == "same":
            return reader, None
        name = self.path.name
        try:
            fresh = Reader(self.path)
            problem = self.check(fresh) if self.check else None
        except (OSError, ValueError) as exc:
            fresh, problem = None, str(exc)
        if fresh is not None and problem is None:
            self.reader, self._reported = fresh, None
            return fresh, f"datastore {name} changed on disk: reopened ({fresh.document_count:,} documents)"
        # A copy in memory is always safe to read; so is a mapped file that was only renamed over
        # (the open file itself is untouched). A mapped file written in place is not.
        safe = reader is not None and (reader.in_memory or reader.disk_state() == "replaced")
        keep = reader if safe else None
        self.reader = keep
        then = "drafting from the copy opened before" if keep is not None else "retrieval drafts are off until it can"
        notice = f"datastore {name} changed on disk and cannot be used ({problem}); {then}"
        if notice == self._reported:
            return keep, None
        self._reported = notice
        return keep, notice
