"""Passages of a text too long to send whole, found by a question: the text cut into passages at
paragraph breaks, indexed with SQLite's FTS5 (the Porter stemmer, bm25 ranking), and the best
passages for the question taken until a token budget is spent, then put back in reading order."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

PASSAGE_WORDS = 160  # a passage's length, about; paragraphs are kept whole where they fit
# a text counts at least a word per this many characters: prose (about 6 with its space) is
# measured by its words, and a run without spaces (minified JSON) is cut into passages too, of
# about a prose passage's tokens (dense text runs 2-4 characters a token)
CHARS_PER_WORD = 6
_RUN = re.compile(r"\S+")
_WORD = re.compile(r"\w{2,}", re.UNICODE)
# words that match everywhere and rank nothing (FTS5 has no stop list of its own)
_STOP = frozenset(
    """a an and are as at be but by can do does for from has have how i if in into is it its
me my no not of on or so than that the their them then there these they this to was we were what when where
which who why will with would you your about should could please tell show give explain""".split()
)


@dataclass(frozen=True)
class Passage:
    """A run of a document's lines (1-based, inclusive) and its text."""

    source: str
    first_line: int
    last_line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.source}, lines {self.first_line}-{self.last_line}"


def words_in(text: str) -> int:
    """A text's length in passage words: its words, or a word per ``CHARS_PER_WORD`` characters
    where that is more (a run with no space, such as minified JSON, is long for its one word)."""
    return max(len(text.split()), len(text) // CHARS_PER_WORD)


def split_passages(source: str, text: str, words: int = PASSAGE_WORDS) -> list[Passage]:
    """Consecutive passages of about ``words`` words, cut between paragraphs where one ends near
    the mark, else between lines, a line longer than a passage between its words, and a run with
    no space longer than a passage between its characters."""
    out: list[Passage] = []
    pieces = list(_pieces(text.split("\n"), words))
    start, count = 0, 0
    for i, (_, piece, ends_paragraph) in enumerate(pieces):
        count += words_in(piece)
        if count >= words and (
            ends_paragraph or count >= 2 * words or i + 1 == len(pieces) or words_in(pieces[i + 1][1]) >= words
        ):
            out.append(_passage(source, pieces[start : i + 1]))
            start, count = i + 1, 0
    if start < len(pieces):
        out.append(_passage(source, pieces[start:]))
    return [p for p in out if p.text.strip()]


def _pieces(lines: list[str], words: int):
    """(line number, text, whether a passage may end there: a paragraph ends, or a run with no
    space was cut): each line, a long one cut into pieces of at most ``words`` passage words; the
    pieces of a line put together are the line."""
    for i, line in enumerate(lines):
        ends = i + 1 == len(lines) or not lines[i + 1].strip() or not line.strip()
        cuts = _cuts(line, words, words * CHARS_PER_WORD)
        for k, (start, end) in enumerate(zip([0, *cuts], [*cuts, len(line)])):
            # a run cut by characters ends its passage there, so a passage of it is one piece long
            inside_run = k < len(cuts) and not line[end - 1].isspace() and not line[end].isspace()
            yield i, line[start:end], (ends and k == len(cuts)) or inside_run


def _cuts(line: str, words: int, limit: int) -> list[int]:
    """Where a line is cut so that no piece holds more than ``words`` words or ``limit``
    characters: before a word, and inside a word only when the word alone is over the limit."""
    cuts, start, count = [], 0, 0
    for word in _RUN.finditer(line):
        if count and (count >= words or word.end() - start > limit):
            cuts.append(word.start())
            start, count = word.start(), 0
        while word.end() - start > limit:  # no space to cut at: cut by characters
            start += limit
            cuts.append(start)
        count += 1
    return cuts


def _passage(source: str, pieces: list) -> Passage:
    # pieces of one line join as they were cut; lines join with a line break
    parts = [("\n" if n and pieces[n - 1][0] != line else "") + piece for n, (line, piece, _) in enumerate(pieces)]
    # a cut between words leaves their space at the passage's end: not part of its text
    return Passage(source, pieces[0][0] + 1, pieces[-1][0] + 1, "".join(parts).lstrip("\n").rstrip())


def query_terms(question: str) -> list[str]:
    """The question's words that can rank passages: no stop words, each quoted for FTS5."""
    seen: list[str] = []
    for word in _WORD.findall(question.lower()):
        if word not in _STOP and word not in seen:
            seen.append(word)
    return seen


def match_expression(question: str) -> str | None:
    """FTS5's MATCH for the question's words, any of them (None: no word that can rank)."""
    terms = query_terms(question)
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) if terms else None


PASSAGE_HEADING_TOKENS = 12  # the "[file, lines a-b]" line each passage is sent under


def within_budget(passages, budget_tokens: int, count_tokens: Callable[[str], int]) -> list:
    """The passages, best first, that fit ``budget_tokens`` together (a long one skipped, later ones tried)."""
    chosen, spent = [], 0
    for passage in passages:
        cost = count_tokens(passage.text) + PASSAGE_HEADING_TOKENS
        if spent + cost <= budget_tokens:
            chosen.append(passage)
            spent += cost
    return chosen


class PassageIndex:
    """Passages in an in-memory FTS5 table, ranked by bm25 for a question."""

    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages
        self._db = sqlite3.connect(":memory:")
        self._db.execute("CREATE VIRTUAL TABLE p USING fts5(body, tokenize='porter unicode61')")
        self._db.executemany("INSERT INTO p (rowid, body) VALUES (?, ?)", enumerate(p.text for p in passages))

    def ranked(self, question: str) -> list[int]:
        """Passage numbers, best first (those that share no word with the question are left out)."""
        match = match_expression(question)
        if match is None:
            return []
        rows = self._db.execute("SELECT rowid FROM p WHERE p MATCH ? ORDER BY bm25(p)", (match,)).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        self._db.close()


def best_passages(
    passages: list[Passage], question: str, budget_tokens: int, count_tokens: Callable[[str], int]
) -> list[Passage]:
    """The passages that best answer ``question`` within ``budget_tokens``, in reading order; with
    no word in common, the document's opening passages."""
    index = PassageIndex(passages)
    try:
        order = index.ranked(question) or list(range(len(passages)))
    finally:
        index.close()
    chosen = within_budget([passages[n] for n in order], budget_tokens, count_tokens)
    return sorted(chosen, key=lambda p: p.first_line)
