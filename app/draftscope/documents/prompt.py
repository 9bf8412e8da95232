"""What the model reads of a message's attachments: each file whole, with its name, while the files
fit the room the context leaves (the conversation so far and the answer's length taken out); a file
that does not fit sends the passages that best answer the message (documents/passages.py), and says
which. A message that names attached files (by name, or by stem where only one file has it) takes
passages from those files only: the others are sent whole where they fit, else left out. The
choice is made once, when the message is sent, and kept with it: the conversation's later turns
read the same prompt, so the model's cache of it stays good."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from draftscope.documents.extract import Attachment
from draftscope.documents.passages import PASSAGE_WORDS, Passage, best_passages, split_passages, words_in

HEADING_TOKENS = 16  # a file's tags around its text
SAMPLE_CHARS = 4000  # the start of a file measured for its tokens a word: enough to be typical, cheap to count


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


def prepare(
    files: Sequence[Attachment], question: str, room_tokens: int, count_tokens: Callable[[str], int]
) -> list[SentFile]:
    """Each file as the model will read it, within ``room_tokens`` for all of them: the smallest
    whole first while they fit, the rest as their best passages for ``question`` in equal shares of
    what is left. When ``question`` names some of the files, only they are sent as passages (a file
    it does not name is sent whole or not at all), and they are tried whole first. Raises ValueError
    when not even a passage of each fits."""
    sizes = {id(f): count_tokens(f.text) + HEADING_TOKENS for f in files}
    cut = {id(f) for f in files_named(question, files) or files}  # the files that may go as passages
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
            left -= sizes[id(f)]
    for i, f in enumerate(pending):
        share = left // (len(pending) - i)
        sent = _passages_of(f, question, share - HEADING_TOKENS, count_tokens)
        out[id(f)] = sent
        left -= sent.tokens + HEADING_TOKENS
    return [out[id(f)] for f in files if id(f) in out]


def files_named(question: str, files: Sequence[Attachment]) -> list[Attachment]:
    """The attached files ``question`` names: by their whole names ("notes.md"), else by their
    stems ("notes") where no other attached file has the same stem; none: the question names none."""
    text = question.casefold()

    def said(word: str) -> bool:  # the word alone, not inside another ("notes" is not in "footnotes")
        return bool(word) and re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", text) is not None

    by_name = [f for f in files if said(f.name.casefold())]
    if by_name:
        return by_name
    stems = [PurePath(f.name).stem.casefold() for f in files]
    return [f for f, stem in zip(files, stems) if stems.count(stem) == 1 and said(stem)]


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
        note = "" if f.whole else f' passages="{len(f.passages)}"'
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
