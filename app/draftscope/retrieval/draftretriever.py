"""A DraftRetriever-compatible face, so REST code switches by changing one import::

    import draftscope.retrieval.draftretriever as draftretriever

    writer = draftretriever.Writer(index_file_path="chat.idx", vocab_size=32000)
    writer.add_entry(token_ids)
    writer.finalize()
    datastore = draftretriever.Reader(index_file_path="chat.idx")
    retrieved_token_list, draft_attn_mask, tree_indices, draft_position_ids, retrieve_indices = \
        datastore.search(this_token, choices=64)

Differences from REST that REST code does not notice: every ``add_entry`` is its own document
(no match or continuation runs from one into the next), token ids are not truncated to 16 bits,
and matches are an even sample of all occurrences rather than the first ``k`` in suffix order.
As in REST, a pattern with a token outside the index's vocabulary matches nothing (an empty
result, not an error). The five buffers are built in Rust (``retriever_rs::rest``): a call costs
what REST's own does.
"""

from __future__ import annotations

from collections.abc import Sequence

from draftscope.retrieval.index import Reader as _Reader
from draftscope.retrieval.index import Writer as _Writer


class Writer:
    def __init__(self, index_file_path: str, max_chunk_len: int | None = None, vocab_size: int | None = None) -> None:
        # max_chunk_len only sized REST's in-memory chunks; one suffix array covers everything here.
        del max_chunk_len
        self._writer = _Writer(index_file_path, 35000 if vocab_size is None else vocab_size)
        self._finalized = False

    def add_entry(self, py_text: Sequence[int]) -> None:
        self._writer.add_entry(py_text)

    def dump_data(self) -> None:
        """REST writes its in-memory chunk out here, so no match crosses into the next chunk. Every
        entry is already its own document and one suffix array is written by ``finalize``, so
        there is nothing to write early; calling it changes nothing, as REST callers expect."""
        if self._finalized:
            raise ValueError("dump_data() after finalize(): the writer is closed")

    def finalize(self) -> None:
        if not self._finalized:
            self._finalized = True
            self._writer.finalize()


class Reader:
    """``search(py_substring, k=None, choices=None, long=None)``: continuations of exactly
    ``py_substring`` (REST's callers try several spans themselves), up to ``k`` matches (5000),
    ``choices`` tree nodes (64), ``long`` tokens deep (10), as REST's five buffers; empty lists
    when nothing matches."""

    def __init__(self, index_file_path: str) -> None:
        self._reader = _Reader(index_file_path)
        # The Rust method itself, with REST's parameter names: REST's loop calls it up to 15 times
        # a step, mostly missing, and a Python layer would cost as much as the search.
        self.search = self._reader._inner.rest_search
