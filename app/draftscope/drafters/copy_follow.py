"""Following a copy through small edits: where in its context (prompt + answer so far) an answer
is copying from, kept through a renamed identifier, added type hints or a dropped token.

The pointer is set from the conversation drafter's suffix match and moves one source token per
answer token that agrees. At a token that does not, the copy is *lost*, not dropped: after each
following token it looks for the nearest source position, a small window ahead of (and a little
behind) where it was lost, whose token is the answer's last one (two tokens further away). Near
the lost place one token is enough: locality makes it reliable, where a match anywhere needs two
or more. What the answer wrote in place of the skipped source is learned as a substitution
(substitutions.py) and applied to the source ahead, so the next occurrence of a renamed
identifier is drafted renamed. A re-anchor stands once CONFIRM tokens agree after it; one that
fails before goes back to where the copy was lost and forgets what it learned.

Only copies of FOLLOW_RUN tokens or more are followed through changes, and only those of
``min_run`` (the run counts through the changes) draft deep or guess where a change ends: elsewhere
a miss drops the pointer, and the drafter behaves as before."""

from __future__ import annotations

from dataclasses import dataclass

from draftscope.drafters.substitutions import MAX_SOURCE, Substitutions

MIN_RUN = 8  # tokens an answer must have copied before its copy is drafted as deep as asked
FOLLOW_RUN = 4  # ... and before it is followed through changes (a shorter match is dropped at a miss)
NEAR = 4  # a one-token re-anchor is trusted this close to where the copy was lost
AHEAD = 32  # how far ahead of it a re-anchor is looked for (two tokens must agree beyond NEAR)
BEHIND = 8  # and how far behind (the answer repeating a few tokens)
CONFIRM = 1  # tokens that must agree after a re-anchor's own before it stands
MAX_LOST = 48  # tokens without a re-anchor after which the copy is given up
GUESSES = 3  # while lost, drafts resume the source 0, 1 or 2 tokens on (an insertion ended, a 1- or 2-token change)
GUESS_WHILE = 4  # ... for this many tokens after the copy was lost
RUN_CAP = 384  # the run a copy reports at most
CONTEXT = 3  # tokens before an insertion or a deletion that its learned substitution keeps (where it applies)


@dataclass(frozen=True)
class Loss:
    source: int  # the source position whose token the answer did not write
    answer: int  # the answer's position of its first token that differed
    run: int  # the copy's run then


class CopyFollower:
    """The copy pointer over ``tokens``, the drafter's own list (it appends, then calls ``step``)."""

    def __init__(self, tokens: list[int], *, min_run: int = MIN_RUN) -> None:
        self.tokens = tokens
        self.min_run = min_run
        self.subs = Substitutions()
        self.reanchors = 0  # re-anchors made in this answer (tests and benchmarks read it)
        self.drop()

    def drop(self) -> None:
        """Follow nothing (the learned substitutions stay: they belong to the answer)."""
        self.source: int | None = None  # the next source position to copy
        self.pending: tuple[int, ...] = ()  # the rest of a substitution being written (source already past it)
        self.applied: tuple[tuple[int, ...], int, int] | None = None  # (Y, its source start, tokens of X written)
        self.run = 0
        self.lost: Loss | None = None
        self.unconfirmed: tuple[Loss, tuple[int, ...] | None] | None = None  # a re-anchor's loss and learned Y
        self.since_change: int | None = None  # tokens agreed since the last re-anchor (None: none yet)

    def follow(self, source: int, run: int) -> None:
        self.drop()
        self.source, self.run = source, min(run, RUN_CAP)

    @property
    def following(self) -> bool:
        return self.source is not None and self.lost is None

    @property
    def is_copy(self) -> bool:
        """Following a copy long enough to draft it as deep as asked."""
        return self.following and self.run >= self.min_run

    @property
    def reanchored(self) -> bool:
        """The copy continues from a re-anchor fewer than ``min_run`` tokens back."""
        return self.since_change is not None and self.since_change < self.min_run

    # ------------------------------------------------------------------ the answer's tokens

    def step(self, position: int) -> None:
        """The answer's token at ``position`` (the last of ``tokens``) was just written."""
        if self.source is None:
            return
        if self.lost is not None:
            self._search(position)
        elif self._agrees(position):
            self.run = min(self.run + 1, RUN_CAP)
            if self.since_change is not None:
                self.since_change += 1
                if self.since_change >= CONFIRM:
                    self.unconfirmed = None
        else:
            self._miss(position)

    def _agrees(self, position: int) -> bool:
        """Whether the token is the copy's next one (through learned substitutions); moves on if so."""
        tok = self.tokens[position]
        if self.pending:
            if self.pending[0] != tok:
                return False
            y, start, written = self.applied
            self.pending = self.pending[1:]
            self.applied = (y, start, written + 1) if self.pending else None
            return True
        p = self.source
        if p >= position:
            return False
        pair = self.subs.at(self.tokens, p, position)
        if pair is not None:
            y, x = pair
            self.applied = (y, p, 0)
            if x[0] != tok:
                return False
            self.source, self.pending = p + len(y), x[1:]
            self.applied = (y, p, 1) if self.pending else None
            return True
        if self.tokens[p] != tok:
            return False
        self.source = p + 1
        return True

    def _miss(self, position: int) -> None:
        if self.run < FOLLOW_RUN and self.since_change is None:
            self.drop()  # not an established copy: the suffix match finds the next one
            return
        loss = Loss(self.source, position, self.run)
        if self.applied is not None:  # a learned substitution the answer did not make here
            y, start, written = self.applied
            self.subs.forget(y)
            self.pending, self.applied = (), None
            if self._kept_source(start, position - written, position):
                return
            loss = Loss(start, position - written, self.run)
        if self.unconfirmed is not None:  # the last re-anchor did not hold: back to where it came from
            loss, learned = self.unconfirmed
            if learned is not None:
                self.subs.forget(learned)
            self.unconfirmed = None
        self.lost = loss
        self._search(position)

    def _kept_source(self, start: int, first: int, position: int) -> bool:
        """Whether the answer wrote the source itself from ``start`` (where a substitution was
        expected); if so the copy goes on after it."""
        n = position + 1 - first
        if start + n > first or self.tokens[start : start + n] != self.tokens[first : position + 1]:
            return False
        self.source = start + n
        self.run = min(self.run + 1, RUN_CAP)
        return True

    # ------------------------------------------------------------------ re-anchoring

    def _search(self, position: int) -> None:
        loss = self.lost
        if position - loss.answer >= MAX_LOST:
            self.drop()
            return
        anchor = self._anchor(loss, position)
        if anchor is not None:
            self._reanchor(loss, anchor, position)

    def _anchor(self, loss: Loss, position: int) -> int | None:
        """The source position nearest the lost one (ahead first at equal distance) holding the
        answer's last token, with the one before it too when further than NEAR; None if none."""
        toks = self.tokens
        tok, before = toks[position], toks[position - 1]
        low, high = max(1, loss.source - BEHIND), min(loss.source + AHEAD, loss.answer - 1)
        for distance in range(AHEAD + 1):
            for a in (loss.source + distance, loss.source - distance) if distance else (loss.source,):
                if low <= a <= high and toks[a] == tok and (distance <= NEAR or toks[a - 1] == before):
                    return a
        return None

    def _reanchor(self, loss: Loss, anchor: int, position: int) -> None:
        toks = self.tokens
        learned = None
        if anchor >= loss.source:  # the source's tokens up to the anchor became the answer's
            source, answer = toks[loss.source : anchor], toks[loss.answer : position]
            if not source or not answer:  # an insertion or a deletion: the tokens before it say where it applies
                before = self._agreed_before(loss, min(CONTEXT, MAX_SOURCE - len(source)))
                source, answer = toks[loss.source - before : anchor], toks[loss.answer - before : position]
            learned = self.subs.learn(source, answer)
        self.lost, self.pending, self.applied = None, (), None
        self.source = anchor + 1
        self.run = min(loss.run + 1, RUN_CAP)
        self.since_change = 0
        self.unconfirmed = (loss, learned)
        self.reanchors += 1

    def _agreed_before(self, loss: Loss, most: int) -> int:
        """How many tokens (up to ``most``) before the change the source and the answer share."""
        toks, n = self.tokens, 0
        while n < min(most, loss.source) and toks[loss.source - 1 - n] == toks[loss.answer - 1 - n]:
            n += 1
        return n

    # ------------------------------------------------------------------ drafts

    def chain(self, depth: int) -> list[int]:
        """The copy's next ``depth`` tokens as the answer would write them (substitutions applied)."""
        if not self.following:
            return []
        return self._continue(self.source, self.pending, depth)

    def guesses(self, depth: int) -> list[list[int]]:
        """While a copy long enough to draft deep is lost (just after a change): the source resumed
        0, 1, 2 tokens on from where it was lost, each ``depth`` tokens."""
        loss = self.lost
        if loss is None or loss.run < self.min_run or len(self.tokens) - loss.answer > GUESS_WHILE:
            return []
        starts = [loss.source + k for k in range(GUESSES) if loss.source + k < loss.answer]
        return [c for c in (self._continue(s, (), depth) for s in starts) if c]

    def _continue(self, source: int, pending: tuple[int, ...], depth: int) -> list[int]:
        toks, end = self.tokens, len(self.tokens)
        out = list(pending[:depth])
        if not self.subs:
            return out + toks[source : source + depth - len(out)]
        p = source
        while len(out) < depth and p < end:
            pair = self.subs.at(toks, p, end)
            if pair is None:
                out.append(toks[p])
                p += 1
            else:
                out.extend(pair[1])
                p += len(pair[0])
        return out[:depth]
