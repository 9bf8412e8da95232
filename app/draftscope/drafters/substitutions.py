"""Substitutions an answer has made to the text it copies: the source had tokens Y where the answer
wrote X (a renamed identifier, ``pat`` -> ``pattern``; type hints added after a parameter). Learned
within one answer by the copy follower (copy_follow.py), applied to the source ahead of the copy so
that the second, third... occurrence is drafted as the answer writes it.

Small and bounded: a few dozen pairs, short token sequences; the oldest is forgotten first, and
the follower forgets a pair the answer did not apply where it could have."""

from __future__ import annotations

from collections.abc import Sequence

MAX_PAIRS = 32  # pairs kept per answer
MAX_SOURCE = 4  # tokens of Y
MAX_ANSWER = 8  # tokens of X


class Substitutions:
    def __init__(self) -> None:
        self.pairs: dict[tuple[int, ...], tuple[int, ...]] = {}  # Y -> X, oldest first
        self._by_first: dict[int, list[tuple[int, ...]]] = {}  # Y's first token -> Ys, longest first

    def __len__(self) -> int:
        return len(self.pairs)

    def learn(self, source: Sequence[int], answer: Sequence[int]) -> tuple[int, ...] | None:
        """Record that the answer writes ``answer`` for ``source``; returns the key (Y), or None
        when the pair is not kept (empty, the same, or too long to be a small regular change)."""
        y, x = tuple(source), tuple(answer)
        if not y or not x or y == x or len(y) > MAX_SOURCE or len(x) > MAX_ANSWER:
            return None
        self.forget(y)
        if len(self.pairs) >= MAX_PAIRS:
            self.forget(next(iter(self.pairs)))
        self.pairs[y] = x
        keys = self._by_first.setdefault(y[0], [])
        keys.append(y)
        keys.sort(key=len, reverse=True)
        return y

    def forget(self, source: tuple[int, ...]) -> None:
        if self.pairs.pop(source, None) is None:
            return
        keys = self._by_first[source[0]]
        keys.remove(source)
        if not keys:
            del self._by_first[source[0]]

    def at(self, tokens: Sequence[int], position: int, end: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The (Y, X) whose Y starts at ``tokens[position]`` and ends before ``end`` (the longest
        when several do), or None."""
        keys = self._by_first.get(tokens[position])
        if not keys:
            return None
        for y in keys:
            stop = position + len(y)
            if stop <= end and tuple(tokens[position:stop]) == y:
                return y, self.pairs[y]
        return None
