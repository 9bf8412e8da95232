"""Drafts from the live conversation (prompt + answer so far): the longest suffix of the context
that occurred earlier in it, and what followed each occurrence, as a tree — prompt lookup, but
branching. The n-gram index is updated incrementally as tokens are accepted.

Where the answer copies its context (a function given back with a rename, a file with a few
changes), a copy pointer follows it through the changes (copy_follow.py): that chain is drafted as
deep as the budget asks, with the top support, merged with the other occurrences' branches, and the
tree says how long the copy has held:

- ``match_len``: how long the copy has held since its last change that no learned substitution
  predicted (tokens that agreed with the source since its last re-anchor, or since it began),
  capped at copy_follow.RUN_CAP; without a followed copy, the suffix match's length or its verbatim
  run, as before: the step policy trusts a chain by it, so a re-anchored copy is trusted anew;
- ``extra["copy_run"]``: the copy's whole run, through learned substitutions and re-anchors (0 when
  no copy is followed); ``extra["reanchored"]``: the
  chain continues from a re-anchor made fewer than ``min_run`` tokens back; ``extra["since_change"]``:
  tokens agreed since that re-anchor (None: none in this copy)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters.copy_follow import RUN_CAP, CopyFollower
from draftscope.drafters.interface import Drafter
from draftscope.drafters.path_trie import PathTrie

ADOPT_RUN = 4  # a lost copy gives way to a suffix match whose verbatim run is this long


def chain_weight(paths: list[list[int]]) -> int:
    """The followed copy's weight: above all other paths together (the top support)."""
    return len(paths) + 1


def chain_tree(chain: list[int], paths: list[list[int]], source: int) -> DraftTree:
    """The followed copy's chain alone, as PathTrie would select it from the chain (weighted above
    all ``paths`` together, so each of its nodes outscores every other) and the paths, when the
    chain fills the budget: a node's support is the chain's weight plus the paths that agree with
    the chain down to it. Built directly: selecting a deep chain from a trie costs its depth times
    its length."""
    counts = np.zeros(len(chain) + 1, np.float32)
    for path in paths:
        agree = 0
        for a, b in zip(path, chain):
            if a != b:
                break
            agree += 1
        counts[agree] += 1
    # paths agreeing through depth d or further: those whose agreement is >= d
    through = np.cumsum(counts[::-1])[::-1][1:]
    n = len(chain)
    return DraftTree(
        tokens=np.array(chain, np.int64),
        parents=np.arange(-1, n - 1, dtype=np.int32),
        depth=np.arange(1, n + 1, dtype=np.int32),
        support=(chain_weight(paths) + through).astype(np.float32),
        source=np.full(n, source, np.int8),
    )


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
        (SuffixDecoding's rule: the speculation grows with the match). A followed copy drafts as
        deep as the budget asks."""
        self.min_suffix, self.max_suffix = min_suffix, max_suffix
        self.max_depth, self.max_matches, self.long_depth = max_depth, max_matches, long_depth
        self.tokens: list[int] = []
        # n-gram (tuple) -> positions just after each occurrence, oldest first
        self.index: dict[tuple[int, ...], list[int]] = defaultdict(list)
        self.follower = CopyFollower(self.tokens)

    def reset(self, context_ids: Sequence[int]) -> None:
        self.tokens = []
        self.index.clear()
        self.follower = CopyFollower(self.tokens)
        self._append(context_ids)

    def observe(self, accepted_ids: Sequence[int]) -> None:
        self._append(accepted_ids)
        if not self.follower.following:  # a copy may begin here while nothing is proposed (drafting paused)
            _, positions = self._suffix_match()
            if positions:
                self._adopt(positions)

    def _append(self, ids: Sequence[int]) -> None:
        for tok in ids:
            self.tokens.append(int(tok))
            end = len(self.tokens)
            for n in range(self.min_suffix, self.max_suffix + 1):
                if end - n < 0:
                    break
                self.index[tuple(self.tokens[end - n : end])].append(end)
            self.follower.step(end - 1)

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        if len(context_ids) != len(self.tokens):  # callers normally keep us in step via observe
            self.reset(context_ids)
        n, positions = self._suffix_match()
        if positions:
            self._adopt(positions)
        paths, match_len = self._occurrences(n, positions)
        paths += self.follower.guesses(self.max_depth)  # just after a change: where the copy may resume
        chain, short = self._copy(budget)
        paths += short
        if not (paths or chain):
            return DraftTree.empty()
        if len(chain) >= budget:  # the copy fills the budget: the others would never be chosen
            tree = chain_tree(chain[:budget], paths, int(self.source))
        else:
            tree = self._merged(paths, chain, budget)
        run = self.follower.run if chain else 0
        # What the step policy trusts: how long the copy has held since its last change no learned
        # substitution predicted (a re-anchored copy is trusted anew; the run through it is kept apart).
        held = run if self.follower.since_change is None else min(run, self.follower.since_change)
        return DraftTree(
            tree.tokens,
            tree.parents,
            tree.depth,
            tree.support,
            tree.source,
            match_len=max(match_len, held),
            match_count=len(positions),
            extra={
                "copy_run": run,
                "reanchored": bool(chain) and self.follower.reanchored,
                "since_change": self.follower.since_change if chain else None,
            },
        )

    def _occurrences(self, n: int, positions: list[int]) -> tuple[list[list[int]], int]:
        """What followed the most recent occurrences of the matched suffix, as deep as its
        verbatim run says, and the tree's match length."""
        if not positions:
            return [], 0
        end = len(self.tokens)
        matched = self._verbatim(positions[-1], end, self.long_depth)
        depth = max(self.max_depth, min(self.long_depth, 2 * matched))
        paths = [self.tokens[p : min(end, p + depth)] for p in positions[-self.max_matches :][::-1]]
        return paths, max(n, matched)

    def _copy(self, budget: int) -> tuple[list[int], list[list[int]]]:
        """(the followed copy's chain, as deep as ``budget``, when the copy is long; else, a copy
        followed through a change drafted as an occurrence would be: [that path])."""
        follower = self.follower
        if follower.is_copy:
            return follower.chain(budget), []
        if follower.following and follower.since_change is not None:
            short = follower.chain(max(self.max_depth, min(self.long_depth, 2 * follower.run)))
            return [], [short] if short else []
        return [], []

    def _merged(self, paths: list[list[int]], chain: list[int], budget: int) -> DraftTree:
        """The occurrences' paths as a tree, and the followed copy's chain above them all."""
        trie = PathTrie()
        for path in paths:
            trie.add(path, source=int(self.source))
        if chain:
            trie.add(chain, weight=float(chain_weight(paths)), source=int(self.source))
        return trie.select(budget)[0]

    def _suffix_match(self) -> tuple[int, list[int]]:
        """(n, the positions after earlier occurrences of the context's last n tokens) for the
        longest n that occurred before; (0, []) if none did."""
        toks = self.tokens
        end = len(toks)
        for n in range(min(self.max_suffix, end), self.min_suffix - 1, -1):
            # Occurrences before the current one (which ends at `end` and has no continuation): the
            # list is in order, so only its last entry can be the current one; the most recent
            # max_matches are all anyone reads (a common bigram's list is thousands long).
            found = self.index.get(tuple(toks[end - n :]), ())
            before = len(found) - (1 if found and found[-1] >= end else 0)
            positions = list(found[max(0, before - self.max_matches) : before])
            if positions:
                return n, positions
        return 0, []

    def _adopt(self, positions: list[int]) -> None:
        """Point the copy at the occurrence with the longest verbatim run, when nothing is
        followed, or when a lost copy meets a run of ADOPT_RUN tokens elsewhere."""
        follower, end = self.follower, len(self.tokens)
        if follower.following:
            return
        candidates = positions[-self.max_matches :]
        best = max(reversed(candidates), key=lambda p: self._verbatim(p, end, self.long_depth))
        run = self._verbatim(best, end, RUN_CAP)
        if follower.source is None or run >= ADOPT_RUN:
            follower.follow(best, run)

    def _verbatim(self, position: int, end: int, limit: int) -> int:
        """How many tokens before ``position`` equal those before the context's end (up to
        ``limit``): the drafts go twice that deep when it is longer than ``max_depth``, and the
        tree carries it as its match length (the step policy trusts a long copy more)."""
        toks, matched = self.tokens, 0
        limit = min(limit, position)
        while matched < limit and toks[position - 1 - matched] == toks[end - 1 - matched]:
            matched += 1
        return matched
