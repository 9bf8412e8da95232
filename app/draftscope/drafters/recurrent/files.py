"""Head files: ``NAME.safetensors`` (the weights and the draft vocabulary) beside ``NAME.json``
(format version, sizes, the target model's identity, the training data and figures).

A head only makes sense for the model it was trained on, so the JSON records that model's
identity (architecture, sizes and a hash of its output rows) and loading refuses a head for
another model with both identities in words.

Reading a head's description, and where the app keeps it, need no torch (the window lists heads on a
machine without it); the weights, a torch module's, import it where they are read or written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from draftscope import paths
from draftscope.drafters.learned import model_key
from draftscope.optional_torch import TorchMissing, torch_available

if TYPE_CHECKING:
    from draftscope.drafters.recurrent.head import RecurrentHead

FORMAT = "draftscope-recurrent-head"
VERSION = 1


class HeadError(ValueError):
    """A head file that cannot be used (missing, damaged, or for another model): the message says why."""


class HeadNeedsTorch(HeadError, TorchMissing):
    """A head cannot be used or trained without torch: optional_torch's words (what, how to install)."""

    def __init__(self, what: str) -> None:
        TorchMissing.__init__(self, what)


def require_torch_for(what: str) -> None:
    """Raise :class:`HeadNeedsTorch` naming ``what`` where torch is not installed."""
    if not torch_available():
        raise HeadNeedsTorch(what)


def target_identity(model, name: str = "") -> dict:
    """What a head must match: architecture, sizes and a hash of the model's output rows (taken
    in bf16, so the same weights loaded in fp32 or bf16 hash the same, and a GGUF read by
    llama.cpp hashes as its de-quantised torch copy does). ``model``: a transformers model or a
    target view (recurrent.target)."""
    import torch  # noqa: PLC0415  # a target view is torch's: torch is there

    from draftscope.drafters.recurrent.target import as_target  # noqa: PLC0415  # torch

    target = as_target(model)
    rows = target.edge_rows().to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    return {
        "name": name,
        "architecture": target.architecture,
        "hidden": target.hidden,
        "layers": target.layers,
        "vocab": target.vocab,
        "weights_sha256": hashlib.sha256(rows).hexdigest(),
    }


def _describe(identity: dict) -> str:
    name = identity.get("name") or identity.get("architecture") or "a model"
    return (
        f"{name} ({identity.get('architecture')}, hidden {identity.get('hidden')}, {identity.get('layers')} layers, "
        f"vocabulary {identity.get('vocab'):,})"
    )


def check_identity(head_target: dict, model_identity: dict) -> None:
    keys = ("architecture", "hidden", "layers", "vocab", "weights_sha256")
    if any(head_target.get(k) != model_identity.get(k) for k in keys):
        same_shape = all(head_target.get(k) == model_identity.get(k) for k in keys[:-1])
        why = " (same sizes, different weights)" if same_shape else ""
        raise HeadError(
            f"this recurrent head was trained for {_describe(head_target)}, not for "
            f"{_describe(model_identity)}{why}: train one for this model (draftscope drafter train)"
        )


def json_path(path: str | os.PathLike[str]) -> Path:
    return Path(path).with_suffix(".json")


def weights_path(path: str | os.PathLike[str]) -> Path:
    return Path(path).with_suffix(".safetensors")


def save_head(head: RecurrentHead, path: str | os.PathLike[str], *, target: dict, training: dict | None = None) -> Path:
    """Write both files atomically (temporary names, then rename); returns the weights path."""
    from safetensors.torch import save_file  # noqa: PLC0415  # safetensors: heavy (TID253's list), only to save or load a head

    weights, meta = weights_path(path), json_path(path)
    weights.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().float().contiguous().cpu() for k, v in head.state_dict().items()}
    tensors["vocab_ids"] = head.vocab_ids.detach().cpu().contiguous()
    tmp_w, tmp_m = weights.with_name(weights.name + ".tmp"), meta.with_name(meta.name + ".tmp")
    save_file(tensors, str(tmp_w), metadata={"format": FORMAT, "version": str(VERSION)})
    tmp_m.write_text(
        json.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "config": head.cfg.to_dict(),
                "target": target,
                "training": training or {},
            },
            indent=2,
        )
    )
    os.replace(tmp_w, weights)
    os.replace(tmp_m, meta)
    return weights


def read_meta(path: str | os.PathLike[str]) -> dict:
    meta = json_path(path)
    try:
        data = json.loads(meta.read_text())
    except FileNotFoundError:
        raise HeadError(f"{meta}: no such file (a head is a .safetensors file with a .json beside it)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeadError(f"{meta}: not a readable head description ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise HeadError(f"{meta}: not a Draftscope recurrent head")
    if data.get("version") != VERSION:
        raise HeadError(f"{meta}: head format version {data.get('version')!r}; this Draftscope reads version {VERSION}")
    return data


def load_head(path: str | os.PathLike[str], model=None, *, model_name: str = "") -> tuple[RecurrentHead, dict]:
    """(head, its JSON description); with ``model``, refuses a head trained for another model.
    Raises HeadError (HeadNeedsTorch where torch is not installed: a head is a torch module)."""
    require_torch_for("A recurrent head (the recurrent drafter's)")
    from safetensors import SafetensorError  # noqa: PLC0415  # safetensors: heavy (TID253's list)
    from safetensors.torch import load_file  # noqa: PLC0415  # safetensors: heavy (TID253's list)

    from draftscope.drafters.recurrent.head import HeadConfig, RecurrentHead  # noqa: PLC0415  # torch

    meta = read_meta(path)
    try:
        cfg = HeadConfig.from_dict(meta["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise HeadError(f"{json_path(path)}: the head's sizes are missing or bad ({exc})") from None
    if model is not None:
        check_identity(meta.get("target") or {}, target_identity(model, model_name))
    weights = weights_path(path)
    try:
        tensors = load_file(str(weights))
    except FileNotFoundError:
        raise HeadError(f"{weights}: no such file") from None
    except (SafetensorError, OSError) as exc:
        raise HeadError(f"{weights}: damaged head weights ({exc})") from None
    head = RecurrentHead(cfg)
    try:
        head.load_state_dict(tensors)
    except RuntimeError as exc:
        raise HeadError(f"{weights}: the weights do not match the head's sizes ({str(exc).splitlines()[0]})") from None
    ids = head.vocab_ids
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= cfg.target_vocab):
        raise HeadError(f"{weights}: draft vocabulary ids outside the model's vocabulary")
    return head.eval(), meta


def heads_dir() -> Path:
    return paths.heads_dir()


def default_head_path(model: str) -> Path:
    """Where the app keeps the recurrent head of ``model`` (catalogue name, folder or file)."""
    return heads_dir() / f"{model_key(model)}.safetensors"
