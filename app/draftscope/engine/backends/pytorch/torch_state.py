"""A torch DynamicCache as bytes and back, for the caches kept on disk (engine/kv_disk.py): each
layer's keys and values [1, kv heads, positions, head dim], raw, after a small JSON header of their
shapes. The tokens are kept beside it by the disk cache."""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from pathlib import Path

import torch

log = logging.getLogger(__name__)


def model_fingerprint(source, model) -> dict:
    """The model's files (path, sizes, mtimes) where it was opened from files; else a digest of its
    weights (a model built in memory: a few tests, a script's model)."""
    if source is not None and Path(source.location).exists():
        where = Path(source.location)
        files = [where] if where.is_file() else sorted(p for p in where.iterdir() if p.is_file())
        return {
            "source": source.kind,
            "path": str(where.resolve()),
            "files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files],
        }
    if source is not None:  # a hub id: its revision, as the config names it
        return {
            "source": source.kind,
            "path": source.location,
            "revision": str(getattr(model.config, "_commit_hash", None)),
        }
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return {"source": "memory", "weights": digest.hexdigest()}


def torch_identity(backend) -> dict:
    """What a saved cache must have been made under: the model, its dtype and device kind, the
    cache's shape and the versions that lay it out."""
    import transformers  # noqa: PLC0415  # heavy: loaded with the model

    config = backend.model.config
    return {
        "backend": type(backend).__name__,
        "model": model_fingerprint(backend.source, backend.model),
        "dtype": str(backend.dtype),
        "device": torch.device(backend.device).type,
        "context": backend.max_context,
        "config": {
            k: str(v)
            for k, v in sorted(config.to_dict().items())
            if k in ("num_hidden_layers", "num_key_value_heads", "head_dim", "hidden_size", "model_type", "vocab_size")
        },
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def export_cache(cache, positions: int) -> bytes | None:
    """The first ``positions`` positions of every layer of ``cache``; None where it holds none."""
    if cache is None or positions <= 0:
        return None
    tensors = []
    for layer in cache.layers:
        if layer.keys is None or layer.keys.numel() == 0 or layer.keys.shape[-2] < positions:
            return None
        tensors += [layer.keys[..., :positions, :], layer.values[..., :positions, :]]
    header = json.dumps({"dtype": str(tensors[0].dtype), "shapes": [list(t.shape) for t in tensors]}).encode()
    body = b"".join(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() for t in tensors)
    return struct.pack("<I", len(header)) + header + body


def import_cache(state: bytes, positions: int, dtype, device):
    """A DynamicCache of ``state`` (export_cache's bytes), checked: every layer holds ``positions``
    positions of ``dtype`` and the bytes are exactly the shapes'. None where they are not."""
    from transformers import DynamicCache  # noqa: PLC0415  # heavy: loaded with the model

    try:
        (size,) = struct.unpack("<I", state[:4])
        header = json.loads(state[4 : 4 + size])
        shapes = [tuple(int(n) for n in s) for s in header["shapes"]]
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        log.warning("a saved torch cache with a damaged header: %s", exc)
        return None
    width = torch.tensor([], dtype=dtype).element_size()
    ends = [0]
    for shape in shapes:
        ends.append(ends[-1] + width * int(torch.Size(shape).numel()))
    body = bytearray(state[4 + size :])
    if header["dtype"] != str(dtype) or len(body) != ends[-1] or len(shapes) % 2 or not shapes:
        log.warning("a saved torch cache of another dtype or size: %s, %d bytes", header["dtype"], len(body))
        return None
    if any(len(s) != 4 or s[-2] != positions for s in shapes):
        log.warning("a saved torch cache whose layers do not hold its %d positions", positions)
        return None
    flat = torch.frombuffer(body, dtype=torch.uint8) if body else torch.empty(0, dtype=torch.uint8)
    tensors = [flat[a:b].view(dtype).reshape(s).to(device) for a, b, s in zip(ends, ends[1:], shapes)]
    cache = DynamicCache()
    for layer in range(len(tensors) // 2):
        cache.update(tensors[2 * layer], tensors[2 * layer + 1], layer)
    return cache
