"""Drafts from the live conversation (prompt + answer so far): the longest suffix of the context
that occurred earlier in it, and what followed each occurrence, as a tree — prompt lookup, but
branching. The n-gram index is updated incrementally as tokens are accepted."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters.interface import Drafter
from draftscope.drafters.path_trie import PathTrie


class ContextDrafter(Drafter):
    name = "context"
    source = DraftSource.CONTEXT

    def __init__(
        self,
        *,
        min_suffix: int = 2,
        max_suffix: int = 8,
        max_depth: int = 10,
        max_matches: int = 32,
        long_depth: int = 64,
    ) -> None:
        """``max_depth``: how deep a match drafts; a longer verbatim match (the answer following an
        attached file line by line) drafts deeper, twice the match's length, up to ``long_depth``
        (SuffixDecoding's rule: the speculation grows with the match)."""
        self.min_suffix, self.max_suffix = min_suffix, max_suffix
        self.max_depth, self.max_matches, self.long_depth = max_depth, max_matches, long_depth
        self.tokens: list[int] = []
        # n-gram (tuple) -> positions just after each occurrence, oldest first
        self.index: dict[tuple[int, ...], list[int]] = defaultdict(list)

    def reset(self, context_ids: Sequence[int]) -> None:
        self.tokens = []
        self.index.clear()
        self._append(context_ids)

    def observe(self, accepted_ids: Sequence[int]) -> None:
        self._append(accepted_ids)

    def _append(self, ids: Sequence[int]) -> None:
        for tok in ids:
            self.tokens.append(int(tok))
            end = len(self.tokens)
            for n in range(self.min_suffix, self.max_suffix + 1):
                if end - n < 0:
                    break
                self.index[tuple(self.tokens[end - n : end])].append(end)

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        if len(context_ids) != len(self.tokens):  # callers normally keep us in step via observe
            self.reset(context_ids)
        toks = self.tokens
        end = len(toks)
        for n in range(min(self.max_suffix, end), self.min_suffix - 1, -1):
            # Occurrences before the current one (which ends at `end` and has no continuation).
            positions = [p for p in self.index.get(tuple(toks[end - n :]), ()) if p < end]
            if not positions:
                continue
            trie = PathTrie()
            matched = self._verbatim(positions[-1], end)
            depth = max(self.max_depth, min(self.long_depth, 2 * matched))
            for p in positions[-self.max_matches :][::-1]:  # the most recent occurrences
                cont = toks[p : min(end, p + depth)]
                if cont:
                    trie.add(cont, source=int(self.source))
            tree, _ = trie.select(budget)
            if len(tree):
                return DraftTree(
                    tree.tokens,
                    tree.parents,
                    tree.depth,
                    tree.support,
                    tree.source,
                    match_len=max(n, matched),
                    match_count=len(positions),
                )
        return DraftTree.empty()

    def _verbatim(self, position: int, end: int) -> int:
        """How many tokens before ``position`` equal those before the context's end (up to
        ``long_depth``): the drafts go twice that deep when it is longer than ``max_depth``, and the
        tree carries it as its match length (the step policy trusts a long copy more)."""
        toks, matched = self.tokens, 0
        limit = min(self.long_depth, position)
        while matched < limit and toks[position - 1 - matched] == toks[end - 1 - matched]:
            matched += 1
        return matched
