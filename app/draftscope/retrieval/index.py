"""Writer and Reader over the Rust index.

What each bad input ends in (the Rust core raises, the binding maps; nothing aborts the process):

- a token past the vocabulary, negative or not an int: ``ValueError`` naming the entry and the
  position (the entry adds nothing); a missing file or folder: ``FileNotFoundError``;
- a foreign, truncated or corrupt file: ``IndexFormatError`` (a ValueError) saying which; a newer
  format version: ``NewerIndexVersionError`` ("upgrade Draftscope or rebuild"); a FIFO, socket,
  device or folder given as the index: ``ValueError``, checked by ``stat`` and opened non-blocking;
- a cancelled build: ``BuildCancelled``, nothing written; a Rust panic: ``RuntimeError``;
- search knobs past their bounds (``max_nodes`` > 65,536, ``max_matches`` or ``max_suffix`` > 2**20):
  ``ValueError`` naming the argument, so no allocation is sized by an unchecked number;
- the file copied over or truncated while open: a reader that read it into memory (files up to
  1 GiB) sees nothing; a mapped one compares size, time stamp and inode before every read and
  raises ``IndexChangedError`` (an OSError) rather than touch a truncated map. A truncation during
  one search of a mapped file is the window left;
- a datastore built with another tokenizer: the header's ``vocab-sha256:`` fingerprint differs
  from the model's (datastore/fingerprint.py); the callers (core/drafter_factory.py) leave
  retrieval out with a note, or refuse ``--drafters retrieval``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from draftscope import _retriever
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.retrieval.tokens import as_token_array


def _search_args(max_nodes: int, max_depth: int, max_matches: int, min_suffix: int, max_suffix: int) -> tuple:
    """The search knobs, checked for type and sign (Rust checks how they relate)."""
    args = (max_nodes, max_depth, max_matches, min_suffix, max_suffix)
    for name, value in zip(("max_nodes", "max_depth", "max_matches", "min_suffix", "max_suffix"), args):
        if type(value) is not int or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if value >= 2**63:  # Rust names the real bound; this keeps the conversion from overflowing
            raise ValueError(f"{name} is far too large ({value})")
    return args


class Writer:
    """Builds one index file from documents of token ids.

    Nothing is written until :meth:`finalize`, which sorts the suffixes and writes the file
    under a temporary name before renaming it, so an exception, a crash or :meth:`cancel` never
    leaves a half-written index and never destroys the previous one. Documents are kept in
    memory until then (4 bytes per token).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        vocab_size: int,
        tokenizer_fingerprint: str = "",
        *,
        threads: int = 0,
    ) -> None:
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            raise ValueError(f"vocab_size must be a positive int, got {vocab_size!r}")
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"directory for the index does not exist: {self.path.parent}")
        self.vocab_size = vocab_size
        self._entries = 0
        self._inner = _retriever.IndexWriter(str(self.path), vocab_size, tokenizer_fingerprint, threads)

    def add_entry(self, tokens: Iterable[int]) -> None:
        """Add one document. Raises ValueError naming the entry and position of a bad token;
        a rejected entry adds nothing."""
        entry = self._entries
        self._entries += 1
        # Rust checks the range and reads numpy integer arrays in place.
        ids = as_token_array(tokens, self.vocab_size, f"entry {entry}", check_range=False, native=True)
        self._inner.add_entry(ids, entry)

    def add_entries(self, entries: Iterable[Iterable[int]]) -> None:
        for tokens in entries:
            self.add_entry(tokens)

    @property
    def documents(self) -> int:
        return self._inner.documents

    @property
    def tokens(self) -> int:
        return self._inner.tokens

    def cancel(self) -> None:
        """Stop a ``finalize`` running on another thread; it raises BuildCancelled."""
        self._inner.cancel()

    def finalize(self) -> dict[str, Any]:
        """Build and write the index. Returns statistics (documents, tokens, file_bytes,
        token_width, sa_width, sa_seconds, finalize_seconds, ...)."""
        stats = self._inner.finalize()
        stats["path"] = str(stats["path"])
        return stats

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Finalize only on success; on an exception nothing is written.
        if exc_type is None:
            self.finalize()


def _tree(raw: tuple) -> DraftTree:
    tokens, parents, depth, support, match_len, match_count, sampled = raw
    return DraftTree(
        tokens=tokens,
        parents=parents,
        depth=depth,
        support=support,
        source=np.full(tokens.shape[0], DraftSource.RETRIEVAL, dtype=np.int8),
        match_len=match_len,
        match_count=match_count,
        extra={"sampled": sampled},
    )


class Reader:
    """An open index. Files up to 1 GiB are read into memory (``in_memory=None``; ``True`` /
    ``False`` force it): a copy in memory never notices the file being copied over or truncated
    afterwards, while a memory-mapped one checks before every read and raises
    :class:`IndexChangedError` instead of faulting. Searches release the GIL and one Reader may be
    shared by any number of threads."""

    def __init__(self, path: str | os.PathLike[str], *, in_memory: bool | None = None) -> None:
        self.path = Path(path)
        self._inner = _retriever.IndexReader(str(self.path), in_memory)
        self._vocab_size = self._inner.vocab_size

    def search(
        self,
        context: Sequence[int] | np.ndarray,
        *,
        max_nodes: int = 64,
        max_depth: int = 10,
        max_matches: int = 256,
        min_suffix: int = 2,
        max_suffix: int = 16,
    ) -> DraftTree:
        """Draft tree continuing ``context``.

        Tries suffixes of the context from ``max_suffix`` tokens down to ``min_suffix`` until
        one occurs in the datastore; reads up to ``max_matches`` of its occurrences, spread evenly
        over all of them; counts what followed (up to ``max_depth`` tokens, never past the end
        of a document) in a trie; returns the ``max_nodes`` most supported nodes as a connected
        tree in BFS order. An empty tree when nothing matches.
        """
        # The token range is checked in Rust: this is the per-step hot path.
        ids = as_token_array(context, self._vocab_size, "context", check_range=False)
        args = _search_args(max_nodes, max_depth, max_matches, min_suffix, max_suffix)
        return _tree(self._inner.search(ids, *args))

    def search_batch(
        self,
        contexts: Iterable[Sequence[int] | np.ndarray],
        *,
        max_nodes: int = 64,
        max_depth: int = 10,
        max_matches: int = 256,
        min_suffix: int = 2,
        max_suffix: int = 16,
    ) -> list[DraftTree]:
        """``search`` for many contexts at once, in parallel on all cores."""
        args = _search_args(max_nodes, max_depth, max_matches, min_suffix, max_suffix)
        arrays = [
            as_token_array(c, self._vocab_size, f"context {i}", check_range=False) for i, c in enumerate(contexts)
        ]
        return [_tree(raw) for raw in self._inner.search_batch(arrays, *args)]

    def document(self, i: int) -> np.ndarray:
        """Token ids of document ``i``."""
        return self._inner.document(i)

    def verify(self) -> None:
        """Check the body checksum; raises IndexFormatError on corruption. Reads the whole file."""
        self._inner.verify()

    @property
    def vocab_size(self) -> int:
        return self._inner.vocab_size

    @property
    def in_memory(self) -> bool:
        """Whether the index was read into memory (else it is memory-mapped)."""
        return self._inner.in_memory

    def disk_state(self) -> str:
        """``"same"``; ``"modified"`` when the open file was written (copied over, truncated);
        ``"replaced"`` when the path now names another file (a rebuilt index) or none."""
        return self._inner.disk_state()

    @property
    def token_count(self) -> int:
        return self._inner.token_count

    @property
    def document_count(self) -> int:
        return self._inner.document_count

    @property
    def token_width(self) -> int:
        return self._inner.token_width

    @property
    def sa_width(self) -> int:
        return self._inner.sa_width

    @property
    def format_version(self) -> int:
        return self._inner.format_version

    @property
    def tokenizer_fingerprint(self) -> str:
        return self._inner.tokenizer_fingerprint

    def info(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format_version": self.format_version,
            "documents": self.document_count,
            "tokens": self.token_count,
            "vocab_size": self.vocab_size,
            "token_width": self.token_width,
            "sa_width": self.sa_width,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "file_bytes": self.path.stat().st_size,
        }

    def __repr__(self) -> str:
        return f"Reader({str(self.path)!r}, documents={self.document_count}, tokens={self.token_count})"
