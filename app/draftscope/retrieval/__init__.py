"""Python face of the Rust retriever (``draftscope._retriever``).

``Writer`` builds a datastore index from token-id documents; ``Reader`` memory-maps one and
turns the end of a context into a :class:`~draftscope.draft_tree.DraftTree`. A
DraftRetriever-compatible face lives in :mod:`draftscope.retrieval.draftretriever`.
"""

from draftscope._retriever import BuildCancelled, IndexFormatError, NewerIndexVersionError
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.retrieval.index import Reader, SearchParams, Writer

__all__ = [
    "BuildCancelled",
    "DraftSource",
    "DraftTree",
    "IndexFormatError",
    "NewerIndexVersionError",
    "Reader",
    "SearchParams",
    "Writer",
]
