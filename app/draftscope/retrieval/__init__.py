"""Python face of the Rust retriever (``draftscope._retriever``).

``Writer`` builds a datastore index from token-id documents; ``Reader`` opens one and
turns the end of a context into a :class:`~draftscope.draft_tree.DraftTree`. A
DraftRetriever-compatible face lives in :mod:`draftscope.retrieval.draftretriever`.
"""

from draftscope import _retriever
from draftscope._retriever import BuildCancelled, IndexChangedError, IndexFormatError, NewerIndexVersionError
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.retrieval._stale_check import warn_if_extension_is_stale
from draftscope.retrieval.index import Reader, Writer

warn_if_extension_is_stale(getattr(_retriever, "__file__", None))

__all__ = [
    "BuildCancelled",
    "DraftSource",
    "DraftTree",
    "IndexChangedError",
    "IndexFormatError",
    "NewerIndexVersionError",
    "Reader",
    "Writer",
]
