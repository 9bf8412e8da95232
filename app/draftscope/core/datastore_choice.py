"""Which datastore a model drafts from. A datastore chosen in the settings (Settings ▸ Drafting, or
the datastore wizard's "Use this datastore now") is the one for the models that share the tokenizer
it was built with (the index header's fingerprint, datastore/fingerprint.py): its ids mean the same
text to them. A model with another tokenizer keeps its own default datastore, and a note says why,
rather than losing retrieval drafts to a datastore it cannot read."""

from __future__ import annotations

import logging
from pathlib import Path

from draftscope.core.drafter_factory import tokenizer_gap
from draftscope.datastore.default import default_datastore_path
from draftscope.retrieval import Reader

log = logging.getLogger(__name__)


def datastore_for(chosen: str, model: str, tokenizer, vocab_size: int | None) -> tuple[Path, str | None]:
    """(the datastore ``model`` drafts from, a note when the chosen one was passed over). ``chosen``:
    the settings' datastore ("" for the model's default)."""
    default = default_datastore_path(model)
    if not chosen:
        return default, None
    path = Path(chosen)
    why = built_for_another(path, tokenizer, vocab_size)
    if why is None:
        return path, None
    instead = "drafting from its own default datastore" if default.is_file() else "it has no datastore of its own"
    note = f"{path.name} is not used with this model: it was built with {why}; {instead}"
    log.info("%s", note)
    return default, note


def built_for_another(path: Path, tokenizer, vocab_size: int | None) -> str | None:
    """How ``path``'s tokenizer differs from the model's, in words; None when it is the same or
    cannot be told (no fingerprint recorded, or the file cannot be opened: opening it for drafting
    says why)."""
    try:
        reader = Reader(str(path), in_memory=False)
    except Exception:  # a missing or damaged index is reported where it is opened for drafting
        return None
    gap = tokenizer_gap(reader, vocab_size, tokenizer)
    if gap == "ids":
        return f"a tokenizer of {reader.vocab_size:,} ids (the model has {vocab_size:,})"
    return "another tokenizer" if gap == "tokenizer" else None
