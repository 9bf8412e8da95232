"""Logprobs on the wire: what a request asks (chat's ``logprobs`` true with ``top_logprobs`` 0..20, the
legacy completions' ``logprobs`` 0..5, llama-server's ``n_probs`` for either) and how the answer's
logprobs are sent: a chat's ``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}``, a
completion's ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``, in the whole reply and in
each streamed chunk (the chunk's tokens only, so a stream's logprobs concatenated are the whole
reply's). The numbers are the model's own (engine/logprobs.py: the raw logits' log_softmax, before
sampling and a grammar's mask, the same with drafting on or off)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from draftscope.engine.detokenizer import Detokenizer
from draftscope.engine.events import FinalEvent, StepEvent, TokenLogprob
from draftscope.engine.logprobs import MAX_TOP, token_bytes, token_text

MAX_LEGACY = 5  # the legacy completions' logprobs: OpenAI's limit


class LogprobsFieldError(ValueError):
    """A logprobs field set wrongly: ``param`` names it, the words say what is wrong."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def requested(body: dict, *, chat: bool) -> int | None:
    """How many alternatives each token lists (0: the chosen token's logprob only), or None: none asked."""
    asked = _chat(body) if chat else _legacy(body)
    probs = _whole(body, "n_probs", MAX_TOP if chat else MAX_LEGACY)
    if not probs:  # llama-server's 0: none
        return asked
    given = body.get("top_logprobs" if chat else "logprobs")
    if body.get("logprobs") is False or (given is not None and given != probs):
        raise LogprobsFieldError("n_probs", "'n_probs' and the logprobs fields ask for two things: send one")
    return probs


def _chat(body: dict) -> int | None:
    on = body.get("logprobs")
    if on is not None and not isinstance(on, bool):
        raise LogprobsFieldError("logprobs", f"'logprobs' must be true or false, got {_shown(on)}")
    top = _whole(body, "top_logprobs", MAX_TOP)
    if top and not on:
        raise LogprobsFieldError("top_logprobs", "'top_logprobs' needs 'logprobs': true")
    return (top or 0) if on else None


def _legacy(body: dict) -> int | None:
    if body.get("top_logprobs"):
        raise LogprobsFieldError(
            "top_logprobs", "'top_logprobs' is the chat API's: /v1/completions takes 'logprobs': N"
        )
    if body.get("logprobs") is False:
        return None
    return _whole(body, "logprobs", MAX_LEGACY)


def _whole(body: dict, name: str, most: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise LogprobsFieldError(name, f"'{name}' must be an integer between 0 and {most}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


class LogprobsWriter:
    """One answer's logprobs in its reply's shape (``chat`` or legacy completions); a stream's text
    offsets run on from chunk to chunk."""

    def __init__(self, tokenizer: Any, *, chat: bool) -> None:
        self.tokenizer, self.chat = tokenizer, chat
        self.bytes_of = token_bytes(tokenizer)
        self.offset = 0  # the answer's characters before the next chunk's first token (completions)

    def step(self, event: StepEvent) -> dict:
        """The logprobs of a streamed chunk: its step's tokens."""
        return self._shaped(event.logprobs or [], event.pieces)

    def whole(self, final: FinalEvent) -> dict:
        """The logprobs of the whole reply: every token's."""
        entries = final.logprobs or []
        detok = Detokenizer(self.tokenizer)
        return self._shaped(entries, [detok.push(e.token) for e in entries])

    def _shaped(self, entries: Sequence[TokenLogprob], pieces: Sequence[str]) -> dict:
        listed = [e.token for e in entries] + [t for e in entries for t, _ in e.top]
        raw = dict(zip(listed, self.bytes_of(listed)))
        if self.chat:
            return {"content": [self._chat_entry(e, raw) for e in entries], "refusal": None}
        offsets = []
        for piece in pieces[: len(entries)]:
            offsets.append(self.offset)
            self.offset += len(piece)
        return {
            "tokens": [token_text(raw[e.token]) for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            # OpenAI's: the alternatives and the chosen token, by text
            "top_logprobs": [{token_text(raw[t]): lp for t, lp in [*e.top, (e.token, e.logprob)]} for e in entries],
            "text_offset": offsets,
        }

    @staticmethod
    def _chat_entry(entry: TokenLogprob, raw: dict[int, bytes]) -> dict:
        def one(token: int, logprob: float) -> dict:
            return {"token": token_text(raw[token]), "logprob": logprob, "bytes": list(raw[token])}

        return {**one(entry.token, entry.logprob), "top_logprobs": [one(t, lp) for t, lp in entry.top]}
