"""What a drafter is: a base class whose defaults say what a drafter that does not care does. The
answer (engine/answer.py) calls every verb; a drafter overrides the ones it needs."""

from __future__ import annotations

from collections.abc import Sequence

from draftscope.draft_tree import DraftSource, DraftTree


class Drafter:
    name: str = "drafter"
    source: DraftSource = DraftSource.TARGET
    wants_hidden: bool = False  # reads the target's hidden state after each step (the recurrent head)

    def reset(self, context_ids: Sequence[int]) -> None:
        """A new answer starts after ``context_ids`` (the prompt)."""

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        """At most ``budget`` nodes continuing ``context_ids`` (whose last token is the root)."""
        return DraftTree.empty()

    def observe(self, accepted_ids: Sequence[int]) -> None:
        """Tokens appended to the context since the last proposal."""

    def set_sampling(self, params, noise) -> None:
        """The answer's sampling and its seeded noise (a draft model couples its drafts to them)."""

    def set_hidden(self, hidden) -> None:
        """The target's last hidden state at the next root (drafters with ``wants_hidden``)."""

    def feedback(self, tree: DraftTree, accepted_path: Sequence[int]) -> None:
        """The step's tree and the nodes the target accepted of it."""
