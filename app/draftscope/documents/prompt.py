"""What the model reads of a message's attachments: each file whole, with its name, while the files
fit the room the context leaves (the conversation so far and the answer's length taken out); a file
that does not fit sends the passages that best answer the message (documents/passages.py), and says
which. A message that names attached files (by name; by stem where only one file has it and the
stem is no ordinary word, see :func:`files_named`) takes passages from those files only: the others
are sent whole where they fit, else left out with a note the model and the user both read (the
file's one "passage" says so: stored as any other, so the chip shows it). The choice is made once,
when the message is sent, and kept with it: the conversation's later turns read the same prompt,
so the model's cache of it stays good."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from draftscope.documents.extract import Attachment
from draftscope.documents.passages import PASSAGE_WORDS, Passage, best_passages, split_passages, words_in

HEADING_TOKENS = 16  # a file's tags around its text
SAMPLE_CHARS = 4000  # the start of a file measured for its tokens a word: enough to be typical, cheap to count
LEFT_OUT = "left out: "  # a file's note when it was not sent (a real passage reads "lines 3-9")
QUOTES = (("`", "`"), ('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"))  # name a stem


@dataclass(frozen=True)
class SentFile:
    """An attachment as it went to the model: ``text`` is what the model read (the file whole, or
    its passages, each headed by its lines), ``tokens`` its size (the tags around it not counted);
    ``passages`` says where they came from (empty: whole)."""

    name: str
    kind: str
    text: str
    tokens: int
    passages: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        return not self.passages

    @property
    def left_out(self) -> str:
        """The note when the file was not sent ("left out: the question names report.md"); empty: it was."""
        return left_out_note(self.as_dict())

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "text": self.text,
            "tokens": self.tokens,
            "passages": list(self.passages),
        }

    @classmethod
    def from_dict(cls, d: dict) -> SentFile:
        return cls(
            str(d["name"]),
            str(d.get("kind", "text")),
            str(d["text"]),
            int(d.get("tokens", 0)),
            tuple(str(p) for p in d.get("passages") or ()),
        )


def left_out_note(f: dict) -> str:
    """A sent file's (SentFile dict's) note when it was left out, as the user reads it; else empty."""
    passages = f.get("passages") or ()
    return str(passages[0]) if len(passages) == 1 and str(passages[0]).startswith(LEFT_OUT) else ""


def prepare(
    files: Sequence[Attachment], question: str, room_tokens: int, count_tokens: Callable[[str], int]
) -> list[SentFile]:
    """Each file as the model will read it, within ``room_tokens`` for all of them: the smallest
    whole first while they fit, the rest as their best passages for ``question`` in equal shares of
    what is left. When ``question`` names some of the files, only they are sent as passages (a file
    it does not name is sent whole, or as a note saying it was left out), and they are tried whole
    first. Raises ValueError when not even a passage of each fits."""
    sizes = {id(f): count_tokens(f.text) + HEADING_TOKENS for f in files}
    named = files_named(question, files)
    cut = {id(f) for f in named or files}  # the files that may go as passages
    out: dict[int, SentFile] = {}
    left = room_tokens

    def reserve(rest) -> int:
        return _reserve([f for f in rest if id(f) in cut])

    pending = sorted(files, key=lambda f: (id(f) not in cut, sizes[id(f)]))
    while pending and sizes[id(pending[0])] <= left - reserve(pending[1:]):
        f = pending.pop(0)
        out[id(f)] = SentFile(f.name, f.kind, f.text, sizes[id(f)] - HEADING_TOKENS)
        left -= sizes[id(f)]
    for f in [f for f in pending if id(f) not in cut]:  # a file the question does not name: whole, or left out
        pending.remove(f)
        if sizes[id(f)] <= left - reserve(pending):
            out[id(f)] = SentFile(f.name, f.kind, f.text, sizes[id(f)] - HEADING_TOKENS)
        else:
            out[id(f)] = _left_out(f, named, count_tokens)
        left -= out[id(f)].tokens + HEADING_TOKENS
    for i, f in enumerate(pending):
        share = left // (len(pending) - i)
        sent = _passages_of(f, question, share - HEADING_TOKENS, count_tokens)
        out[id(f)] = sent
        left -= sent.tokens + HEADING_TOKENS
    return [out[id(f)] for f in files if id(f) in out]


def files_named(question: str, files: Sequence[Attachment]) -> list[Attachment]:
    """The attached files ``question`` names: by their whole names ("notes.md"), else by their
    stems where no other attached file has the same stem and the stem cannot be an ordinary word
    of the question: it holds a digit, "_", "-" or "." ("q3_report"), or the question quotes it
    ("what does `report` say?"). "the report" names nothing: "report", "test", "data" are words
    in any question. None: the question names none."""
    text = question.casefold()

    def said(word: str) -> bool:  # the word alone, not inside another ("notes" is not in "footnotes")
        return bool(word) and re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", text) is not None

    def quoted(word: str) -> bool:
        return any(f"{a}{word}{b}" in text for a, b in QUOTES)

    by_name = [f for f in files if said(f.name.casefold())]
    if by_name:
        return by_name
    stems = [PurePath(f.name).stem.casefold() for f in files]
    return [
        f
        for f, stem in zip(files, stems)
        if stems.count(stem) == 1 and (said(stem) and _unlike_a_word(stem) or quoted(stem))
    ]


def _unlike_a_word(stem: str) -> bool:
    """A stem no ordinary word spells: it holds a digit, "_", "-" or "."."""
    return any(c.isdigit() or c in "_-." for c in stem)


def _left_out(f: Attachment, named: Sequence[Attachment], count_tokens) -> SentFile:
    """A file the question does not name and that does not fit whole: the model reads a note
    saying so (so it knows the file exists), and the message's chip shows it."""
    note = f"{LEFT_OUT}the question names {', '.join(n.name for n in named)}"
    return SentFile(f.name, f.kind, note, count_tokens(note), (note,))


def _reserve(rest: Sequence[Attachment]) -> int:
    """Room kept for the files that will be sent as passages: a few passages each."""
    return 600 * len(rest)


def _passages_of(f: Attachment, question: str, budget: int, count_tokens) -> SentFile:
    # passages small enough that about four fit the budget, in this text's tokens a passage word
    # (counted as split_passages counts them, so a file written on one line is measured too)
    sample = f.text[:SAMPLE_CHARS]
    per_word = max(1.0, count_tokens(sample) / max(1, words_in(sample)))
    words = max(20, min(PASSAGE_WORDS, int(budget / per_word / 4)))
    chosen: list[Passage] = (
        best_passages(split_passages(f.name, f.text, words), question, budget, count_tokens) if budget > 0 else []
    )
    if not chosen:
        raise ValueError(
            f"{f.name} does not fit the model's context, not even a passage of it: start a new "
            "conversation, or attach less"
        )
    text = "\n\n".join(f"[lines {p.first_line}-{p.last_line}]\n{p.text}" for p in chosen)
    return SentFile(
        f.name, f.kind, text, count_tokens(text), tuple(f"lines {p.first_line}-{p.last_line}" for p in chosen)
    )


def render(text: str, files: Sequence[SentFile]) -> str:
    """A user message as the model reads it: its files, each in tags naming it, then what was typed."""
    if not files:
        return text
    blocks = []
    for f in files:
        note = "" if f.whole or f.left_out else f' passages="{len(f.passages)}"'
        blocks.append(f'<file name="{_attr(f.name)}"{note}>\n{f.text}\n</file>')
    return "\n\n".join(blocks + [text])


def _attr(name: str) -> str:
    return name.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def from_documents(index, question: str, budget: int, count_tokens) -> SentFile | None:
    """The passages of a documents folder (documents.folder.FolderIndex) that best answer
    ``question`` within ``budget`` tokens, as one file the message carries (None: none found)."""
    found = index.search(question, budget - HEADING_TOKENS, count_tokens) if budget > HEADING_TOKENS else []
    if not found:
        return None
    text = "\n\n".join(f"[{p.where}]\n{p.text}" for p in found)
    return SentFile(
        f"{index.folder.name} (documents)", "documents", text, count_tokens(text), tuple(p.where for p in found)
    )
