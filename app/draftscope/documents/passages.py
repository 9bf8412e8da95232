"""Passages of a text too long to send whole, found by a question: the text cut into passages at
paragraph breaks, indexed with SQLite's FTS5 (the Porter stemmer, bm25 ranking), and the best
passages for the question taken until a token budget is spent, then put back in reading order."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

PASSAGE_WORDS = 160  # a passage's length, about; paragraphs are kept whole where they fit
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


def split_passages(source: str, text: str, words: int = PASSAGE_WORDS) -> list[Passage]:
    """Consecutive passages of about ``words`` words, cut between paragraphs where one ends near
    the mark, else between lines, and a line longer than a passage between its words."""
    out: list[Passage] = []
    pieces = list(_pieces(text.split("\n"), words))
    start, count = 0, 0
    for i, (_, piece, ends_paragraph) in enumerate(pieces):
        count += len(piece.split())
        if count >= words and (
            ends_paragraph or count >= 2 * words or i + 1 == len(pieces) or len(pieces[i + 1][1].split()) >= words
        ):
            out.append(_passage(source, pieces[start : i + 1]))
            start, count = i + 1, 0
    if start < len(pieces):
        out.append(_passage(source, pieces[start:]))
    return [p for p in out if p.text.strip()]


def _pieces(lines: list[str], words: int):
    """(line number, text, whether a paragraph ends there): each line, a long one cut into runs of
    ``words`` words."""
    for i, line in enumerate(lines):
        ends = i + 1 == len(lines) or not lines[i + 1].strip() or not line.strip()
        tokens = line.split(" ")
        if len(line.split()) <= words:
            yield i, line, ends
            continue
        for k in range(0, len(tokens), words):
            yield i, " ".join(tokens[k : k + words]), ends and k + words >= len(tokens)


def _passage(source: str, pieces: list) -> Passage:
    parts: list[str] = []
    for n, (line, piece, _) in enumerate(pieces):
        same_line = n > 0 and pieces[n - 1][0] == line
        parts.append((" " if same_line else "\n" if n else "") + piece)
    return Passage(source, pieces[0][0] + 1, pieces[-1][0] + 1, "".join(parts).strip("\n"))


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
