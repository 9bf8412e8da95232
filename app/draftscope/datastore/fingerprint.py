"""A short, stable identity for a tokenizer, stored in index headers so a datastore built with
one tokenizer is never silently searched with another.

Drafts are token ids, so what must agree is which text each id stands for: the fingerprint hashes
the vocabulary in id order (``vocab-sha256:``). Indexes built before this hashed the tokenizer's
whole JSON (``sha256:``), which also changes with the library's version; those are confirmed when
they match and otherwise left to the vocabulary-size check."""

from __future__ import annotations

import hashlib

VOCAB_KIND = "vocab-sha256:"
LEGACY_KIND = "sha256:"


def tokenizer_fingerprint(tokenizer) -> str:
    """``vocab-sha256:<hex>`` of the tokens in id order (added tokens included)."""
    vocab = tokenizer.get_vocab()
    blob = "\n".join(sorted(vocab, key=vocab.get)).encode()
    return VOCAB_KIND + hashlib.sha256(blob).hexdigest()[:32]


def _legacy_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        blob = backend.to_str().encode()
    else:
        vocab = tokenizer.get_vocab()
        blob = "\n".join(sorted(vocab, key=vocab.get)).encode()
    return LEGACY_KIND + hashlib.sha256(blob).hexdigest()[:32]


def same_tokenizer(recorded: str, tokenizer) -> bool | None:
    """Whether an index whose header records ``recorded`` was built with ``tokenizer``'s ids:
    True / False, or None when the record cannot tell (none recorded, another kind, or an older
    fingerprint that differs only perhaps because the library changed)."""
    if recorded.startswith(VOCAB_KIND):
        return recorded == tokenizer_fingerprint(tokenizer)
    if recorded.startswith(LEGACY_KIND) and recorded == _legacy_fingerprint(tokenizer):
        return True
    return None
