"""The OpenAI response objects and stream chunks Draftscope sends (a chat's and a plain completion's), with
Draftscope's drafts and statistics in an extension field ``draftscope``; and the stop sequences' holdback
while streaming. Requests are read in ``server/protocol.py``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def finish_reason(final_reason: str) -> str:
    """OpenAI's words for the engine's: an end token, a stop sequence or a loop stopped (the server's
    own stop rule, like a stop sequence: "length" would tell a client to ask for more of the loop)
    is "stop"; the engine's own word is in the stats' ``finish_reason``."""
    return "length" if final_reason == "length" else "stop"


def step_extension(ev) -> dict:
    """Which of a step's tokens were drafted, and by which drafter (None: the target's own)."""
    return {
        "step": ev.step,
        "proposed": ev.proposed,
        "accepted": ev.accepted,
        "tokens": [
            {"id": t, "text": p, "drafted_by": None if src == "target" else src}
            for t, p, src in zip(ev.token_ids, ev.pieces, ev.provenance)
        ],
    }


def stats_extension(final) -> dict:
    s = final.stats
    return {
        "tokens": s.tokens,
        "steps": s.steps,
        "tau": round(s.tau, 4),
        # the window's one tokens/s: the writing rate after the first token (null: one step), the first apart
        "tokens_per_second": None if s.decode_tokens_per_second is None else round(s.decode_tokens_per_second, 3),
        "time_to_first_token_ms": round(s.time_to_first_token_ms, 3),
        # over plain decoding at the same context; with why it may not be a speedup at all
        "speedup_estimate": None if s.speedup_estimate is None else round(s.speedup_estimate, 4),
        "plain_tokens_per_second": None if s.plain_tokens_per_second is None else round(s.plain_tokens_per_second, 3),
        "busy": s.busy,
        "drafting": s.drafting,
        "drafters": s.drafters,
        "accepted_by_source": s.accepted_by_source,
        "seed": s.seed,  # what decided the tokens at T > 0: sending it back as `seed` reproduces the answer
        "finish_reason": final.finish_reason,  # the engine's: "eos", "length", "stop", "loop" (it repeated itself)
        # answers its steps shared a forward with, itself included (null: it had the model to itself)
        "answers_per_forward": None if s.answers_per_forward is None else round(s.answers_per_forward, 3),
        "prompt_tokens_read": None if s.prompt_kept is None else s.prompt_tokens - s.prompt_kept,
    }


def usage(prompt_tokens: int, stats) -> dict:
    """OpenAI's usage, with the prompt tokens found in the cache of the turns before (not read again)."""
    out = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": stats.tokens,
        "total_tokens": prompt_tokens + stats.tokens,
    }
    if stats.prompt_kept is not None:
        out["prompt_tokens_details"] = {"cached_tokens": stats.prompt_kept}
    return out


def chat_response(rid: str, model: str, final, prompt_tokens: int) -> dict:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": final.text},
                "finish_reason": finish_reason(final.finish_reason),
                "logprobs": None,
            }
        ],
        "usage": usage(prompt_tokens, final.stats),
        "draftscope": stats_extension(final),
    }


def completion_response(rid: str, model: str, final, prompt_tokens: int) -> dict:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "text": final.text, "finish_reason": finish_reason(final.finish_reason), "logprobs": None}
        ],
        "usage": usage(prompt_tokens, final.stats),
        "draftscope": stats_extension(final),
    }


def chat_chunk(
    rid: str,
    model: str,
    created: int,
    *,
    delta: dict,
    finish: str | None = None,
    extension: dict | None = None,
    index: int = 0,
) -> dict:
    """A chat stream's chunk of choice ``index`` (of n: server/choices.py)."""
    chunk = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    if extension is not None:
        chunk["draftscope"] = extension
    return chunk


def completion_chunk(
    rid: str,
    model: str,
    created: int,
    *,
    text: str,
    finish: str | None = None,
    extension: dict | None = None,
    index: int = 0,
) -> dict:
    """A plain completion stream's chunk of choice ``index`` (of n: server/choices.py)."""
    chunk = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": index, "text": text, "finish_reason": finish, "logprobs": None}],
    }
    if extension is not None:
        chunk["draftscope"] = extension
    return chunk


class StopHoldback:
    """Text safe to stream while stop sequences may still match: the tail that could be the start
    of a stop sequence is held back until the next tokens decide it."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.stops = stops
        self.text = ""
        self.sent = 0

    def push(self, piece: str) -> str:
        self.text += piece
        cut = min((i for i in (self.text.find(s) for s in self.stops) if i >= 0), default=-1)
        safe = cut if cut >= 0 else max(self.sent, len(self.text) - self.hold)
        out, self.sent = self.text[self.sent : safe], max(self.sent, safe)
        return out

    def finish(self, final_text: str) -> str:
        """What is left to send of the answer's final text (already cut at a stop sequence)."""
        rest = final_text[self.sent :] if final_text.startswith(self.text[: self.sent]) else ""
        self.sent = len(final_text)
        return rest
