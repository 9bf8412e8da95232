"""Benchmark-only drafter whose drafts are the known greedy answer: the best any drafter could
do at a given tree budget, so the gap to it shows what better drafts would buy."""

from __future__ import annotations

from collections.abc import Sequence

from draftscope.draft_tree import DraftSource, DraftTree, chain_tree
from draftscope.drafters.interface import Drafter


class OracleDrafter(Drafter):
    name = "oracle"
    source = DraftSource.ORACLE

    def __init__(self, answer_ids: Sequence[int], prompt_len: int, *, max_depth: int = 16) -> None:
        self.answer = list(answer_ids)
        self.prompt_len = prompt_len
        self.max_depth = max_depth

    def reset(self, context_ids: Sequence[int]) -> None:
        pass

    def observe(self, accepted_ids: Sequence[int]) -> None:
        pass

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        done = len(context_ids) - self.prompt_len
        return chain_tree(self.answer[done : done + min(budget, self.max_depth)], self.source)
