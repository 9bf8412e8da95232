"""The model's recurrent head in words (Settings ▸ Drafting, the training dialog): read off the head's
description beside it. Without PyTorch a head cannot draft, so it is described as none."""

from __future__ import annotations

from draftscope import optional_torch


def _tokens_text(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1000:,.0f}k" if n >= 10_000 else f"{n / 1000:.1f}k" if n >= 1000 else f"{n:,}"


def head_training(model_spec: str) -> dict | None:
    """The ``training`` part of the model's head description (None when it has no usable head: none
    written, or no PyTorch to draft with it)."""
    if not optional_torch.torch_available():
        return None
    from draftscope.drafters.recurrent.files import HeadError, default_head_path, read_meta  # noqa: PLC0415  # torch

    path = default_head_path(model_spec)
    if not path.with_suffix(".json").exists():
        return None
    try:
        return read_meta(path).get("training") or {}
    except HeadError:
        return None


def head_description(model_spec: str) -> str:
    """The model's head in words ("trained on 600k tokens, validation τ 1.90"); "" when it has none."""
    training = head_training(model_spec)
    if training is None:
        return ""
    parts = [f"trained on {_tokens_text(int(training['tokens']))} tokens"] if training.get("tokens") else ["trained"]
    tau = (training.get("validation") or {}).get("tau_chain")
    if tau is not None:
        parts.append(f"validation τ {tau:.2f}")
    return ", ".join(parts)
