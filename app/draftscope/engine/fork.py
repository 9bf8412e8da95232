"""n answers to one prompt (the server's ``n``): each an answer of its own, with its own seed and its own
slot, stepping in the same forwards as any answers running together do (engine/stepper.py), but the
prompt read once. The answers of one request share a :class:`Fork`: the stepper admits them together
(waiting a moment for siblings still on their way), one of them reads the prompt (the one whose slot
kept the most of it), and the others wait in their slots until it has, then copy its cache
(``Backend.copy_slot``: llama.cpp tags the same cells with their own sequence, torch copies the slot's
rows) and go straight to their first step.

Exact as any answer: a copied prefix holds what reading it would (the same tokens at the same
positions), and each answer's tokens come from its own seed's noise. Where a copy cannot serve (a
backend that does not copy slots, a drafter that needs the prompt's last hidden state from its own
reading) an answer reads the prompt itself; a reader that ends before it has read hands the reading
to a sibling."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from draftscope.engine.backends.base import Backend
from draftscope.engine.request import GenerationRequest

# How long the stepper holds back the answers of a fork whose siblings are not all submitted yet (the
# server starts them one after another on its event loop), before it admits those that are there:
# answers admitted apart are as exact, only their first steps are not shared.
GATHER_S = 0.25
SEEDS = 2**64  # seeds wrap within OpenAI's 64-bit signed range, as the server takes them


class Member(Protocol):
    """What a fork reads of one of its answers (engine/answer.py's Answer)."""

    prompt: list[int]
    slot: int
    backend: Backend
    finished: bool
    phase: str  # "waiting" until it is admitted into a slot
    wants_hidden: bool

    @property
    def kept(self) -> int: ...

    def read_to(self) -> int: ...


class Fork:
    """The answers to one prompt: who reads it, who copies it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.members: list[Member] = []
        self.first_joined = 0.0  # time.monotonic() when the first member joined
        self.reader: Member | None = None  # the member whose reading the others copy
        self.copied = 0  # members that copied the prompt instead of reading it

    def join(self, answer: Member) -> None:
        if not self.members:
            self.first_joined = time.monotonic()
        self.members.append(answer)

    def gathering(self) -> bool:
        """Whether its members wait to be admitted: siblings are still on their way (a moment at most)."""
        return len(self.members) < self.size and time.monotonic() - self.first_joined < GATHER_S

    def copied_for(self, answer: Member) -> int | None:
        """Before ``answer`` reads its prompt: None while a sibling reads it (the answer waits this
        round); else the prompt positions just copied into its slot from that sibling's (0: it reads
        the prompt itself)."""
        if not answer.backend.copies_slots or answer.wants_hidden:  # its drafter reads its own reading
            return 0
        source = self._source(answer)
        if source is answer:
            return 0
        prefix = len(answer.prompt) - 1
        if source.read_to() < prefix:
            return None
        answer.backend.copy_slot(source.slot, answer.slot, prefix)
        self.copied += 1
        return prefix

    def _source(self, asking: Member) -> Member:
        """The running member to copy the prompt from: the reader while it runs; after it ended, a
        sibling that already holds the prompt, else the one whose slot kept the most of it (on a tie
        ``asking``), which reads it."""
        if self.reader is not None and not self.reader.finished:
            return self.reader
        running = [m for m in self.members if m.phase != "waiting" and not m.finished]
        holding = [m for m in running if m is not asking and m.read_to() >= len(m.prompt) - 1]
        if holding:
            return holding[0]
        self.reader = max(running, key=lambda m: (m.kept, m is asking), default=asking)
        return self.reader


@dataclass
class ForkedRequest(GenerationRequest):
    """One of n answers to one prompt: the fork they share, and its place among them."""

    fork: Fork | None = None
    index: int = 0


def fork(requests: Sequence[GenerationRequest]) -> list[ForkedRequest]:
    """``requests`` (one prompt; each with drafters and a cancel of its own) as the answers of one
    fork. Where the first sets a seed, the i-th answer's is that seed + i, so each answer is the
    answer a single request with its seed gives; where none is set, each answer draws its own."""
    group = Fork(len(requests))
    first_seed = requests[0].sampling.seed if requests else None
    out = []
    for index, request in enumerate(requests):
        given = {f.name: getattr(request, f.name) for f in dataclasses.fields(GenerationRequest)}
        if first_seed is not None:
            given["sampling"] = dataclasses.replace(request.sampling, seed=seed_after(first_seed, index))
        out.append(ForkedRequest(**given, fork=group, index=index))
    return out


def seed_after(seed: int, steps: int) -> int:
    """``seed`` + ``steps`` within the signed 64-bit range (past its top it wraps to its bottom)."""
    return (seed + steps + SEEDS // 2) % SEEDS - SEEDS // 2


def fork_of(request: GenerationRequest, answer: Member) -> Fork | None:
    """The fork ``answer`` (to ``request``) joins, or None: an answer of its own."""
    if not isinstance(request, ForkedRequest) or request.fork is None:
        return None
    request.fork.join(answer)
    return request.fork
