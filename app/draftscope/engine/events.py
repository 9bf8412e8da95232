"""What the engine tells its callers (GUI worker, CLI, benchmark): plain Python data only."""

from __future__ import annotations

from dataclasses import dataclass, field

from draftscope.draft_tree import DraftSource, DraftTree

SOURCE_NAMES = {s.value: s.name.lower() for s in DraftSource}


def tree_to_dict(tree: DraftTree) -> dict:
    return {
        "tokens": tree.tokens.tolist(),
        "parents": tree.parents.tolist(),
        "depth": tree.depth.tolist(),
        "support": [float(x) for x in tree.support.tolist()],
        "source": [SOURCE_NAMES[int(s)] for s in tree.source.tolist()],
    }


@dataclass
class StepEvent:
    step: int
    token_ids: list[int]
    pieces: list[str]  # decoded text of each new token
    provenance: list[str]  # per token: "retrieval", "context", "model", "recurrent", "learned" or "target"
    tree: dict  # the step's draft tree (tree_to_dict)
    accepted_path: list[int]  # node indices, root-down
    proposed: int
    accepted: int
    draft_ms: float
    verify_ms: float
    total_ms: float
    tokens_total: int
    steps_total: int
    tau: float  # tokens per step so far
    tokens_per_second: float
    speedup_estimate: float | None  # decode rate so far over the measured plain decode rate


@dataclass
class MessageStats:
    tokens: int
    steps: int
    tau: float
    tokens_per_second: float  # all tokens over the whole time, prompt processing included
    time_to_first_token_ms: float
    elapsed_s: float
    speedup_estimate: float | None  # decode rate over the measured plain decode rate
    decode_tokens_per_second: float | None = None  # after the first step (prefill excluded)
    drafters: list[str] = field(default_factory=list)
    accepted_by_source: dict[str, int] = field(default_factory=dict)


@dataclass
class FinalEvent:
    finish_reason: str  # "eos", "length", "stop", "cancel", "error"
    text: str
    token_ids: list[int]
    stats: MessageStats
    error: str | None = None
    prompt_tail: list[int] = field(default_factory=list)  # the prompt's last tokens (what led into the answer)
