"""The model's recurrent head in words (Settings ▸ Drafting, the training dialog), read off the head's
description beside it (no torch needed: the window starts without it). Without PyTorch a head cannot
draft, and its description says so."""

from __future__ import annotations

from draftscope import optional_torch
from draftscope.drafters.recurrent.files import HeadError, default_head_path, read_meta


def _tokens_text(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1000:,.0f}k" if n >= 10_000 else f"{n / 1000:.1f}k" if n >= 1000 else f"{n:,}"


def head_training(model_spec: str) -> dict | None:
    """The ``training`` part of the model's head description (None when it has no usable head)."""
    path = default_head_path(model_spec)
    if not path.with_suffix(".json").exists():
        return None
    try:
        return read_meta(path).get("training") or {}
    except HeadError:
        return None


def head_description(model_spec: str) -> str:
    """The model's head in words ("trained on 600k tokens, validation τ 1.90"); "" when it has none;
    "…; it needs PyTorch, not installed here" where it cannot draft."""
    training = head_training(model_spec)
    if training is None:
        return ""
    parts = [f"trained on {_tokens_text(int(training['tokens']))} tokens"] if training.get("tokens") else ["trained"]
    tau = (training.get("validation") or {}).get("tau_chain")
    if tau is not None:
        parts.append(f"validation τ {tau:.2f}")
    missing = "" if optional_torch.torch_available() else "; it needs PyTorch, not installed here"
    return ", ".join(parts) + missing
