"""A short, stable identity for a tokenizer, stored in index headers so a datastore built with
one tokenizer is never silently searched with another."""

from __future__ import annotations

import hashlib


def tokenizer_fingerprint(tokenizer) -> str:
    """``sha256:<hex>`` of the fast tokenizer's full JSON (vocabulary, merges, normalizers)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        blob = backend.to_str().encode()
    else:  # slow (sentencepiece) tokenizers: the vocabulary in id order
        vocab = tokenizer.get_vocab()
        blob = "\n".join(sorted(vocab, key=vocab.get)).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:32]
