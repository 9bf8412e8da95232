"""Drafts from a datastore: the Rust Reader's longest-suffix search. The same drafter serves the
model's learned answers (``LearnedDrafter``: another source, so the panels and the step policy
tell them apart)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters.interface import Drafter
from draftscope.retrieval import IndexChangedError, Reader


class RetrievalDrafter(Drafter):
    name = "retrieval"
    source = DraftSource.RETRIEVAL

    def __init__(
        self,
        reader: Reader | str,
        *,
        max_depth: int = 10,
        max_matches: int = 256,
        min_suffix: int = 2,
        max_suffix: int = 16,
    ) -> None:
        self.reader = reader if isinstance(reader, Reader) else Reader(reader)
        self.max_depth, self.max_matches = max_depth, max_matches
        self.min_suffix, self.max_suffix = min_suffix, max_suffix

    def reset(self, context_ids: Sequence[int]) -> None:
        pass

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        tail = np.asarray(context_ids[-self.max_suffix :], dtype=np.int64)
        if tail.size and int(tail.max()) >= self.reader.vocab_size:
            return DraftTree.empty()  # a token the datastore's tokenizer never produces
        try:
            tree = self.reader.search(
                tail,
                max_nodes=budget,
                max_depth=self.max_depth,
                max_matches=self.max_matches,
                min_suffix=self.min_suffix,
                max_suffix=self.max_suffix,
            )
        except IndexChangedError:
            # A mapped datastore copied over during the answer: no drafts from it (the answer goes
            # on; the next one reopens the file and says so).
            return DraftTree.empty()
        if self.source != DraftSource.RETRIEVAL and len(tree):
            tree.source[:] = self.source
        return tree

    def observe(self, accepted_ids: Sequence[int]) -> None:
        pass


class LearnedDrafter(RetrievalDrafter):
    """Drafts from the model's own past answers (datastore.learned)."""

    name = "learned"
    source = DraftSource.LEARNED
