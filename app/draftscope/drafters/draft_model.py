"""A draft model for a target: opened on the target's device and dtype (a GGUF beside a llama.cpp
target in a llama.cpp context of its own, with no torch), refused in words when its tokenizer differs."""

from __future__ import annotations

from draftscope.engine.arrays import is_torch
from draftscope.engine.backends import open_backend
from draftscope.engine.backends.pytorch.loader import LoadedModel, load_model
from draftscope.engine.engine import Engine
from draftscope.models.resolve import load_tokenizer, resolve_model
from draftscope.optional_torch import require_torch


def load_draft_model(
    spec: str, target: LoadedModel | object, *, device: str | None = None, dtype: str | None = None
) -> LoadedModel:
    """A draft model for ``target`` (a LoadedModel or an Engine: anything with ``tokenizer``,
    ``device`` and ``dtype``), in the target's device and dtype unless told otherwise. Refused with
    the reason in words when its tokenizer differs from the target's: its drafts would be other
    words, so every one would be rejected (or, worse, accepted by chance)."""

    source = resolve_model(spec)
    target_backend = target.backend if isinstance(target, Engine) else None  # a LoadedModel runs on torch
    # beside a llama.cpp target, a GGUF draft model runs in a llama.cpp context of its own; else on torch
    on_llama = target_backend is not None and target_backend.kind == "llama.cpp" and source.kind == "gguf"
    if not on_llama:
        require_torch(f"The draft model {source.display_name} (it runs on torch beside this model)")
    why = draft_incompatibility(target.tokenizer, load_tokenizer(source))
    if why:
        raise ValueError(f"{source.display_name} cannot be a draft model here: {why}")
    if on_llama:
        opened = open_backend(source, backend="llama.cpp", context=target.max_context, threads=target_backend.threads)
        return LoadedModel(opened, opened.tokenizer, source, opened.device, None, opened.precision_reason)
    dev = str(device or (target.device if is_torch(target.device) else "cpu"))  # llama.cpp's device is a word
    dt = dtype or (str(target.dtype).removeprefix("torch.") if target.dtype is not None else None)
    return load_model(source, device=dev, dtype=dt)


def draft_incompatibility(target_tokenizer, draft_tokenizer) -> str | None:
    """Why a draft model with ``draft_tokenizer`` cannot draft for a target with
    ``target_tokenizer`` (None when it can): drafts are token ids, so both must mean the same text
    by the same id."""
    target_n, draft_n = len(target_tokenizer), len(draft_tokenizer)
    if target_n != draft_n:
        return (
            f"the draft model's tokenizer has {draft_n:,} tokens and the model's has {target_n:,}: "
            "its drafts would be other words"
        )
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        return "the draft model's tokenizer gives other ids to the same tokens: its drafts would be other words"
    if target_tokenizer.eos_token_id != draft_tokenizer.eos_token_id:
        return "the draft model ends answers with another token"
    return None
