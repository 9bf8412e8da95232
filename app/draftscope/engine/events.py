"""What the engine tells its callers (GUI worker, CLI, benchmark): plain Python data only.
An answer's events: ReadingEvents while its prompt is read (only when asked for), a StepEvent a
step, a FinalEvent last."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeAlias

from draftscope.draft_tree import DraftSource, DraftTree

SOURCE_NAMES = {s.value: s.name.lower() for s in DraftSource}


@dataclass
class StepTree:
    """A step's draft tree as plain lists (node i: its token, parent index or -1, depth, support
    and the drafter that proposed it), in the drafters' breadth-first order."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    support: list[float] = field(default_factory=list)
    source: list[str] = field(default_factory=list)  # "retrieval", "context", "model", ...

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def of(cls, tree: DraftTree) -> StepTree:
        return cls(
            tree.tokens.tolist(),
            tree.parents.tolist(),
            tree.depth.tolist(),
            [float(x) for x in tree.support.tolist()],
            [SOURCE_NAMES[int(s)] for s in tree.source.tolist()],
        )

    @classmethod
    def from_dict(cls, d: dict | None) -> StepTree:
        """A stored tree (any version: missing lists are empty, unknown keys ignored)."""
        d = d or {}
        return cls(*(list(d.get(name) or []) for name in ("tokens", "parents", "depth", "support", "source")))


@dataclass
class TokenLogprob:
    """A said token's log-probability under the model (the raw logits' log_softmax: engine/logprobs.py)
    and the most likely tokens at its position, (token, logprob), most likely first."""

    token: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> TokenLogprob:
        return cls(int(d["token"]), float(d["logprob"]), [(int(t), float(lp)) for t, lp in d.get("top") or []])


# stored with each answer's steps (storage.history.encode_steps); 2: a step's logprobs, where its answer asked
STEP_FORMAT = 2


@dataclass
class StepEvent:
    """One decoding step. Stored with each answer; :func:`step_from_dict` reads any stored
    version, so adding or renaming a field never breaks the replay of old answers."""

    step: int
    token_ids: list[int]
    pieces: list[str]  # decoded text of each new token
    provenance: list[str]  # per token: "retrieval", "context", "model", "recurrent", "learned", "grammar" or "target"
    tree: StepTree  # the step's draft tree
    accepted_path: list[int]  # node indices, root-down
    proposed: int
    accepted: int
    draft_ms: float
    verify_ms: float
    total_ms: float
    tokens_total: int
    steps_total: int
    tau: float  # tokens per step so far
    tokens_per_second: float  # every token over the time since the answer began, its first token's wait included
    speedup_estimate: float | None  # the writing rate over plain decoding's at the same context
    # Known to the engine, so views need not re-derive them (None in steps stored before they existed).
    elapsed_ms: float | None = None  # since the answer began (prompt processing included)
    # THE tokens/s every face shows (the writing rate): the tokens after the first step over the time
    # since the first token; None at step 1 (the first token's wait is shown apart: elapsed_ms, time to
    # first token)
    decode_tokens_per_second: float | None = None
    plain_tokens_per_second: float | None = None  # plain decoding's rate at this answer's context
    busy: bool = False  # its plain steps ran far slower than plain decoding measured: another program has the CPU
    drafting: str | None = None  # why drafting is off now ("drafting paused: …"; head, colon, why); None: it runs
    # each said token's logprob, an end-of-sequence token's excepted (its text is no part of the answer);
    # None: the answer did not ask (GenerationRequest.logprobs)
    logprobs: list[TokenLogprob] | None = None


@dataclass
class MessageStats:
    tokens: int
    steps: int
    tau: float
    tokens_per_second: float  # all tokens over the whole time, prompt processing included (not shown as a rate)
    time_to_first_token_ms: float
    elapsed_s: float
    speedup_estimate: float | None  # the writing rate over plain decoding's at the same context
    decode_tokens_per_second: float | None = None  # THE tokens/s (the writing rate, as StepEvent's); None: one step
    drafters: list[str] = field(default_factory=list)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    seed: int | None = None  # what decided the answer's tokens at T > 0 (None: greedy); reproduces it
    answers_per_forward: float | None = None  # answers its steps' forwards held on average (None: not shared)
    prompt_tokens: int | None = None  # the prompt's tokens (None in answers stored before this was kept)
    prompt_kept: int | None = None  # of those, found in the model's cache from the turns before: not read again
    # Of the kept ones (0 in answers stored before these were counted): read by a read ahead (a background
    # answer before Send, since the slot's last answer), and loaded from a cache on disk, in these seconds.
    prompt_read_ahead: int = 0
    prompt_restored: int = 0
    restore_seconds: float = 0.0
    plain_tokens_per_second: float | None = None  # plain decoding's rate at the answer's context (mean)
    busy: bool = False  # its plain steps ran far slower than measured (its speedup is not to be trusted)
    drafting: str | None = None  # why drafting was off for most of its steps (None: it ran)


@dataclass
class ReadingEvent:
    """How far the prompt's reading (prefill) is, before the first token: ``read`` of ``total``
    tokens (those the model's cache kept from the turns before are in neither). Only for a request
    that asks (``GenerationRequest.reading_progress``: the window), so a consumer that knows only
    StepEvent and FinalEvent (the server, the terminal, the benchmarks) never sees one. One when
    reading begins (read 0), then one after each part; the last has read == total. Not stored."""

    read: int
    total: int


@dataclass
class FinalEvent:
    finish_reason: str  # "eos", "length", "stop", "loop" (it repeated itself verbatim), "cancel", "error"
    text: str
    token_ids: list[int]
    stats: MessageStats
    error: str | None = None
    prompt_tail: list[int] = field(default_factory=list)  # the prompt's last tokens (what led into the answer)
    logprobs: list[TokenLogprob] | None = None  # every step's logprobs in order, where the answer asked for them


# What an answer says, in order: ReadingEvents (only when asked), a StepEvent a step, a FinalEvent last
Event: TypeAlias = ReadingEvent | StepEvent | FinalEvent


def step_from_dict(d: dict) -> StepEvent:
    """A stored step of any version: fields this version does not know are ignored, missing ones
    get what can be derived (a piece and a "target" provenance per token, an empty tree, zeros)."""
    ids = [int(t) for t in d.get("token_ids") or []]
    defaults = {
        "step": 0,
        "token_ids": ids,
        "pieces": [""] * len(ids),
        "provenance": ["target"] * len(ids),
        "tree": None,
        "accepted_path": [],
        "proposed": 0,
        "accepted": 0,
        "draft_ms": 0.0,
        "verify_ms": 0.0,
        "total_ms": 0.0,
        "tokens_total": 0,
        "steps_total": 0,
        "tau": 0.0,
        "tokens_per_second": 0.0,
        "speedup_estimate": None,
        "elapsed_ms": None,
        "decode_tokens_per_second": None,
        "plain_tokens_per_second": None,
        "busy": False,
        "drafting": None,
        "logprobs": None,
    }
    known = {f.name for f in fields(StepEvent)}
    optional = (
        "speedup_estimate",
        "elapsed_ms",
        "decode_tokens_per_second",
        "plain_tokens_per_second",
        "drafting",
        "logprobs",
    )
    values = {**defaults, **{k: v for k, v in d.items() if k in known and (v is not None or k in optional)}}
    values = {k: v for k, v in values.items() if k in known}
    values["tree"] = StepTree.from_dict(values["tree"])
    values["logprobs"] = _stored_logprobs(values["logprobs"])
    return StepEvent(**values)


def _stored_logprobs(value) -> list[TokenLogprob] | None:
    """A stored step's logprobs; damaged ones (an edited file) are left out, the step replays."""
    try:
        return None if value is None else [TokenLogprob.from_dict(x) for x in value]
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
