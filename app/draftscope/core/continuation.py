"""Continue: an answer that was cut (at the length limit, stopped as a loop, or by the user) written
on, as the same message.

The continued answer is the one an uncut answer would have been, token for token: the prompt is
the conversation as the model read it for that answer followed by the answer's own tokens (kept
with its steps, never its text tokenized again, which can give other tokens), and its sampling
uses the answer's seed. A token's noise is keyed by (seed, absolute position) (engine/sampling.py),
so the continuation draws each later position's token exactly as the uncut answer would; the
model's cache still holds the conversation and the answer, so only the answer's last token is read.
The tokens must be the running model's: after a switch to another vocabulary Continue is refused.

The message is then extended in place (storage/history.py ``extend_answer``): its text decoded
from all its tokens, its steps the old ones and the new (numbered on), its figures over both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from draftscope.engine.events import FinalEvent, StepEvent

# How an answer ends when more of it may follow: cut at the length limit, stopped as a loop, stopped by the user.
CONTINUABLE = ("length", "loop", "cancel")


@dataclass
class Continuation:
    """An answer being continued: what it had, and the request that writes on."""

    message_id: int
    tokens: list[int]  # the answer's tokens so far
    text: str
    steps: list[dict]  # its stored steps
    stats: dict
    drafters: dict
    prompt: list[int]  # the conversation before it, then its tokens
    request: object = None  # the GenerationRequest, once made


def can_continue(message, *, has_steps: bool, max_context: int) -> bool:
    """Whether an answer can be written on: it was cut, its tokens were kept (its steps: an imported
    answer has none), and the context has room for more."""
    stats = message.stats if isinstance(message.stats, dict) else {}
    if message.role != "assistant" or stats.get("finish_reason") not in CONTINUABLE or not has_steps:
        return False
    used = [stats.get(k) for k in ("prompt_tokens", "tokens")]
    counted = [n for n in used if isinstance(n, (int, float)) and not isinstance(n, bool)]
    if len(counted) == len(used):
        return sum(counted) < max_context
    return True  # an answer stored before its prompt was counted: continue_request checks the room


def answer_tokens(steps: list[dict]) -> list[int]:
    """An answer's tokens, as its stored steps said them."""
    return [int(t) for step in steps for t in step.get("token_ids") or []]


# Why an answer of another model is not continued (its tokens mean other text to this tokenizer).
OTHER_MODEL = "this answer was written by another model; Regenerate instead"


def written_by(tokenizer, text: str, tokens: list[int]) -> bool:
    """Whether an answer's stored ``tokens`` are this tokenizer's tokens for its stored ``text``.

    After a switch to a model with another vocabulary the same ids decode to other text: fed to the
    new model they are garbage, and the continued answer's text (decoded from all its tokens) would
    replace the answer with it. The answer's text is its tokens decoded (special tokens skipped), so
    the running tokenizer must give it back; whitespace at either end is not compared."""
    try:
        decoded = tokenizer.decode(tokens, skip_special_tokens=True)
    except (OverflowError, IndexError, TypeError, ValueError):  # an id this tokenizer cannot hold
        return False
    return decoded.strip() == text.strip()


def by_running_model(session, message) -> bool:
    """Whether a kept answer's stored tokens are the running model's (``written_by``)."""
    tokens = answer_tokens(session.history.steps(message.id))
    return written_by(session.engine.tokenizer, message.content, tokens)


def prepare(session, message_id: int, before: list[dict], tools: list[dict] | None = None) -> Continuation:
    """What continuing ``message_id`` needs (``before``: the conversation the model read for it, as
    messages; ``tools``: those it was shown, in its prompt as the template shows them); ValueError,
    in words, when it cannot be continued."""
    history = session.history
    if history is None or session.conversation_id is None:
        raise ValueError("only an answer kept in the history can be continued")
    messages = history.messages(session.conversation_id)
    if not messages or messages[-1].id != message_id:
        raise ValueError("only the conversation's last answer can be continued")
    message = messages[-1]
    steps = history.steps(message_id)
    if not can_continue(message, has_steps=bool(steps), max_context=session.engine.max_context):
        raise ValueError("this answer ended by itself, or its tokens were not kept: it cannot be continued")
    tokens = answer_tokens(steps)
    if not written_by(session.engine.tokenizer, message.content, tokens):
        raise ValueError(OTHER_MODEL)
    prompt = session.engine.encode_chat(before, tools) + tokens
    if len(prompt) >= session.engine.max_context:
        raise ValueError(
            f"the conversation and this answer fill the model's context ({session.engine.max_context:,} tokens): "
            "start a new conversation to go on"
        )
    return Continuation(message_id, tokens, message.content, steps, message.stats, message.drafters or {}, prompt)


def numbered_on(step: StepEvent, after: Continuation) -> StepEvent:
    """A new step as a step of the whole answer (live and stored alike: ChatSession.stream makes it
    so): numbered after the old ones, its totals counting the old part, its time running on from the
    old part's last token (the speedup panel's x axis), tau and the rate over both parts."""
    steps, tokens = step.steps_total + len(after.steps), step.tokens_total + len(after.tokens)
    elapsed = None if step.elapsed_ms is None else step.elapsed_ms + first_part_ms(after)
    return dataclasses.replace(
        step,
        step=step.step + len(after.steps),
        steps_total=steps,
        tokens_total=tokens,
        tau=tokens / steps,
        elapsed_ms=elapsed,
        tokens_per_second=tokens / (elapsed / 1000) if elapsed else step.tokens_per_second,
    )


def first_part_ms(after: Continuation) -> float:
    """When the answer's first part wrote its last token, in ms since it began: its last step's time
    (its figures' or its steps' summed where steps stored before that was kept lack it)."""
    last = after.steps[-1].get("elapsed_ms") if after.steps else None
    if isinstance(last, (int, float)) and not isinstance(last, bool):
        return float(last)
    return 1000 * _number(after.stats.get("elapsed_s")) or sum(_number(s.get("total_ms")) for s in after.steps)


def joined_stats(old: dict, new: dict) -> dict:
    """The figures of the whole answer: counts and time added, rates over both parts, the first
    token's wait and the prompt's figures from the first part, how it ended from the last."""
    out = {**new, **{k: old[k] for k in _FIRST_PART if k in old}}
    for key, kind in (("tokens", int), ("steps", int), ("elapsed_s", float)):
        out[key] = kind(_number(old.get(key)) + _number(new.get(key)))
    out["tau"] = out["tokens"] / out["steps"] if out["steps"] else 0.0
    out["tokens_per_second"] = out["tokens"] / out["elapsed_s"] if out["elapsed_s"] else 0.0
    for key in _RATES:  # each part's tokens at its own rate
        out[key] = _over_both(old, new, key)
    for key in old.keys() & new.keys():  # a flag ("the computer was busy") holds if it held in either part
        if isinstance(old[key], bool) and isinstance(new[key], bool):
            out[key] = old[key] or new[key]
    return out


_RATES = ("speedup_estimate", "decode_tokens_per_second", "plain_tokens_per_second")


_FIRST_PART = (
    "time_to_first_token_ms",
    "prompt_tokens",
    "prompt_kept",
    "prompt_read_ahead",
    "prompt_restored",
    "restore_seconds",
)


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _over_both(old: dict, new: dict, key: str) -> float | None:
    """A per-token rate over both parts: each part's tokens at its own rate (None: not known for both)."""
    parts: list[tuple[float, float]] = []
    for d in (old, new):
        rate = d.get(key)
        if not isinstance(rate, (int, float)) or rate <= 0:
            return None
        parts.append((_number(d.get("tokens")), rate))
    time = sum(tokens / rate for tokens, rate in parts)
    return sum(tokens for tokens, _ in parts) / time if time else None


def joined_drafters(old: dict, new: dict) -> dict:
    """Which drafters wrote the answer and how many tokens each had accepted, over both parts."""
    accepted = dict(old.get("accepted_by_source") or {})
    for source, n in (new.get("accepted_by_source") or {}).items():
        accepted[source] = accepted.get(source, 0) + n
    return {**new, "accepted_by_source": accepted}


def joined_text(tokenizer, continuation: Continuation, final: FinalEvent) -> str:
    """The whole answer's text, decoded from all its tokens (a character the cut split is whole again)."""
    return tokenizer.decode(continuation.tokens + list(final.token_ids), skip_special_tokens=True)


def extend(history, tokenizer, continuation: Continuation, final: FinalEvent, steps, record: tuple[dict, dict]) -> int:
    """Keep the continued answer in its message (``steps``: the new part's, already ``numbered_on``;
    ``record``: its (stats, drafters) as session.answer_record makes them); returns the message's id."""
    stats, drafters = record
    history.extend_answer(
        continuation.message_id,
        joined_text(tokenizer, continuation, final),
        stats=joined_stats(continuation.stats, stats),
        drafters=joined_drafters(continuation.drafters, drafters),
        steps=continuation.steps + list(steps or []),
    )
    return continuation.message_id
