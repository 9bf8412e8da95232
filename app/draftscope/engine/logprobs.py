"""The model's own log-probabilities of the tokens an answer says (OpenAI's ``logprobs`` and
``top_logprobs``), and each token's bytes as a client is shown them.

A said token's logprob is the log_softmax of the target's raw logits at the row that chose it: before
the repetition penalty, temperature, top-k, top-p and min-p, and before a grammar's mask (vLLM's default
"raw logprobs"): what the model itself thinks of the token, whatever the sampling made of it. The verify
forward already has a row of logits for the root and for every node, so the accepted path's rows give
them: no second forward, and the same numbers with drafting on or off (a row's logits depend on its
prefix alone; in fp32 exactly). Computed only for an answer that asks (``GenerationRequest.logprobs``).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from draftscope.engine import arrays as A
from draftscope.engine.events import TokenLogprob

if TYPE_CHECKING:
    from draftscope.engine.arrays import Array

MAX_TOP = 20  # alternatives a token may list at most (OpenAI's top_logprobs limit)


def said_rows(path: Sequence[int], count: int) -> list[int]:
    """The verify rows that chose a step's first ``count`` said tokens: the root's row the first, then
    the row of each accepted node the token after it (the bonus token's is the last accepted node's)."""
    return ([0] + [1 + int(node) for node in path])[:count]


def said_logprobs(
    logits: Array, path: Sequence[int], tokens: Sequence[int], ends: Collection[int], top: int
) -> list[TokenLogprob]:
    """Each said token's logprob and the ``top`` most likely tokens at its position (most likely first),
    from the verify's raw ``logits`` [1 + nodes, vocab] (NumPy's or torch's). The tokens stop before an
    end of the answer (one of ``ends``): its text is no part of the answer."""
    spoken = next((k for k, t in enumerate(tokens) if int(t) in ends), len(tokens))
    rows = said_rows(path, spoken)
    if not rows:
        return []
    logprobs = A.log_softmax(A.floats(logits[rows]))
    ids = A.like(np.array([[int(t)] for t in tokens[:spoken]], dtype=np.int64), logprobs)
    chosen = A.gather(logprobs, ids)[:, 0].tolist()
    k = min(max(0, top), MAX_TOP, logprobs.shape[-1])
    if k == 0:
        return [TokenLogprob(int(t), lp) for t, lp in zip(tokens, chosen)]
    values, which = A.topk(logprobs, k)
    alternatives = [list(zip(w, v)) for w, v in zip(which.tolist(), values.tolist())]
    return [TokenLogprob(int(t), lp, alt) for t, lp, alt in zip(tokens, chosen, alternatives)]


# ---------------------------------------------------------------------------------- a token's bytes


@functools.cache
def _gpt2_bytes() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's): the printable Latin-1 bytes stand for themselves, every
    other byte for the character 256 + its rank among those others."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    kept = set(printable)
    others = [b for b in range(256) if b not in kept]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(others)}


class TokenBytes:
    """Each token's own bytes, as OpenAI shows them (``bytes``): a token that is part of a multi-byte
    character gives its raw part. Byte-level vocabularies (GPT-2's, Qwen's, Llama 3's) are read through
    their alphabet, SentencePiece ones through "▁" (a space) and ``<0xNN>`` (one byte); added tokens
    (``<|im_end|>``) are their text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.byte_level = tokenizer.convert_tokens_to_string(["\u0120"]) == " "
        self.added = {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", None) or {})}

    def __call__(self, ids: Sequence[int]) -> list[bytes]:
        pieces = self.tokenizer.convert_ids_to_tokens([int(i) for i in ids])
        return [self._bytes(int(i), piece or "") for i, piece in zip(ids, pieces)]

    def _bytes(self, token: int, piece: str) -> bytes:
        if token in self.added:
            return piece.encode()
        if self.byte_level:
            alphabet = _gpt2_bytes()
            if all(c in alphabet for c in piece):
                return bytes(alphabet[c] for c in piece)
            return piece.encode()
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("\u2581", " ").encode()


@functools.lru_cache(maxsize=4)
def token_bytes(tokenizer: Any) -> TokenBytes:
    """The reader of ``tokenizer``'s token bytes (one per model)."""
    return TokenBytes(tokenizer)


def token_text(raw: bytes) -> str:
    """A token as text: its bytes decoded, or, where they are part of a character, OpenAI's
    ``bytes:\\xe2\\x80`` form."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
