from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from draftscope.draft_tree import DraftSource, DraftTree


class Drafter(Protocol):
    name: str
    source: DraftSource

    def reset(self, context_ids: Sequence[int]) -> None:
        """A new answer starts after ``context_ids`` (the prompt)."""

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        """At most ``budget`` nodes continuing ``context_ids`` (whose last token is the root)."""

    def observe(self, accepted_ids: Sequence[int]) -> None:
        """Tokens appended to the context since the last proposal."""
