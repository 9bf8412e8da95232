"""What one forward asks of a backend, per slot: a chunk of a prompt, or a root and its draft tree.
The stepper (engine/stepper.py) gathers one item per answer into one ``decode_many`` call;
ForwardStats says what that forward held."""

from __future__ import annotations

from dataclasses import dataclass

from draftscope.draft_tree import DraftTree

MAX_TREE = 64  # nodes per tree when several answers share a forward (the step policy's largest)
# The most nodes one answer's tree has (the step policy asks no more; llama.cpp alone would take 511):
# past a few hundred even a fully accepted chain gains little on any curve, and drafting and trimming
# such trees each step would cost a plain step's time in Python.
MAX_DRAFT = 256
PREFILL_BATCH = 512  # prompt tokens a forward takes at most
SHARED_PREFILL = 64  # prompt tokens a slot adds to a forward other answers are decoding in


@dataclass
class Prefill:
    """Prompt tokens for a slot's cache, from position ``start``; no logits wanted."""

    tokens: list[int]
    start: int
    want_hidden: bool = False  # the last token's hidden state as the result (backends that give them)


@dataclass
class Verify:
    """A root and its draft tree: a row of logits for each."""

    root: int
    tree: DraftTree
    past: int | None = None  # the positions the caller put in its slot's cache (None: not checked)
    want_hidden: bool = False  # also the last hidden state of each row (backends that give them)


@dataclass
class ForwardStats:
    """What the last forward held, for the step policy: a tree's nodes cost what they add to a
    forward other answers share."""

    tokens: int = 0  # tokens in the forward, every answer's
    answers: int = 0  # answers in it
    seconds: float = 0.0  # the forward's own time


def tokens_of(item) -> int:
    """Tokens an item puts in a forward."""
    if isinstance(item, Prefill):
        return len(item.tokens)
    return 1 + len(item.tree)
