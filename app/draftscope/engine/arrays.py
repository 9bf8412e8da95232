"""The array operations the sampling rule is written in, on NumPy arrays (llama.cpp's rows: no torch
on the default path) and on torch tensors (the torch backends' rows, on their device: a CUDA row
never goes to the host whole) alike. Each dispatches on the array's type, so torch is imported only
where a torch tensor is already in hand (its module is loaded then).

Every operation works over the last axis, as torch's ``dim=-1``, and keeps torch's semantics where a
choice is made: argmax takes the first of equal maxima, sorts are stable, top-k returns values in
descending order, and a cumulative sum accumulates in double and rounds to float32 as torch does on a
CPU. NumPy computes in float32 throughout (the rows are float32 already)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import torch

    # a row or rows of logits, probabilities or ids: NumPy's on llama.cpp, torch's on the torch backends
    Array: TypeAlias = np.ndarray | torch.Tensor

NEG_INF = float("-inf")


def is_torch(x: object) -> bool:
    """Whether ``x`` is torch's (a tensor, a Parameter, a device), asked without importing torch."""
    return type(x).__module__.split(".", 1)[0] == "torch"


def torch_module() -> Any:
    """torch itself, for code handed a torch model or tensors (torch is loaded then)."""
    import torch

    return torch


def inference() -> contextlib.AbstractContextManager:
    """torch's inference mode where torch is loaded (a torch model runs: no autograd records its
    steps), else nothing: llama.cpp's answers never load torch for it."""
    torch = sys.modules.get("torch")
    return torch.inference_mode() if torch is not None else contextlib.nullcontext()


# ---------------------------------------------------------------------- moving between kinds


def like(x: Any, ref: Any) -> Any:
    """``x`` (NumPy or torch) as ``ref``'s kind: a tensor on ``ref``'s device, or a NumPy array."""
    if is_torch(ref):
        import torch

        return torch.as_tensor(x, device=ref.device)
    return x.cpu().numpy() if is_torch(x) else np.asarray(x)


def to_numpy(x: Any) -> np.ndarray:
    """``x`` on the host as a NumPy array (a small one: ids, a few rows)."""
    return x.detach().cpu().numpy() if is_torch(x) else np.asarray(x)


def floats(x: Any) -> Any:
    """``x`` as float32 (a copy only where it was another type)."""
    return x.float() if is_torch(x) else np.asarray(x, dtype=np.float32)


def copy(x: Any) -> Any:
    return x.clone() if is_torch(x) else x.copy()


def zeros(shape: Sequence[int], ref: Any) -> Any:
    """Zeros of ``ref``'s dtype (and device)."""
    if is_torch(ref):
        import torch

        return torch.zeros(tuple(shape), dtype=ref.dtype, device=ref.device)
    return np.zeros(tuple(shape), dtype=ref.dtype)


def cat(parts: Sequence[Any]) -> Any:
    if is_torch(parts[0]):
        import torch

        return torch.cat(list(parts))
    return np.concatenate(list(parts))


def pad_last(x: Any, extra: int) -> Any:
    """``x`` with ``extra`` zeros after the last axis's entries."""
    if is_torch(x):
        import torch

        return torch.nn.functional.pad(x, (0, extra))
    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, extra)])


# ---------------------------------------------------------------------- element-wise


def where(condition: Any, a: Any, b: Any) -> Any:
    if is_torch(condition):
        import torch

        return torch.where(condition, a, b)
    return np.where(condition, a, b)


def masked_fill(x: Any, mask: Any, value: float) -> Any:
    """``x`` with ``value`` where ``mask`` is set (a new array)."""
    if is_torch(x):
        return x.masked_fill(mask, value)
    return np.where(mask, x.dtype.type(value), x)


def isfinite(x: Any) -> Any:
    if is_torch(x):
        import torch

        return torch.isfinite(x)
    return np.isfinite(x)


def log(x: Any) -> Any:
    """The natural log (log 0 is -inf, silently)."""
    if is_torch(x):
        return x.log()
    with np.errstate(divide="ignore"):
        return np.log(x)


def clamp_max(x: Any, most: int) -> Any:
    return x.clamp(max=most) if is_torch(x) else np.minimum(x, most)


def nonzero(x: Any) -> tuple[Any, ...]:
    """The indices of ``x``'s set entries, one array per axis."""
    return x.nonzero(as_tuple=True) if is_torch(x) else np.nonzero(x)


# ---------------------------------------------------------------------- over the last axis


def argmax(x: Any) -> Any:
    """Each row's index of its maximum (the first of equal maxima, as in torch and NumPy both)."""
    return x.argmax(-1)


def amax(x: Any) -> Any:
    """Each row's maximum, kept as a column."""
    return x.amax(-1, keepdim=True) if is_torch(x) else x.max(-1, keepdims=True)


def softmax(x: Any) -> Any:
    if is_torch(x):
        return x.softmax(-1)
    with np.errstate(invalid="ignore"):  # a row all -inf is NaN, as torch's is
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def log_softmax(x: Any) -> Any:
    if is_torch(x):
        return x.log_softmax(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = x - x.max(-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def cumsum(x: Any) -> Any:
    """The running sum along each row; NumPy's summed in double and rounded to float32, as torch's
    CPU kernel does (so a top-p cut falls where torch's falls)."""
    if is_torch(x):
        return x.cumsum(-1)
    return np.cumsum(x, -1, dtype=np.float64).astype(x.dtype)


def gather(x: Any, ids: Any) -> Any:
    """``x[r, ids[r, j]]`` for each row r."""
    return x.gather(-1, ids) if is_torch(x) else np.take_along_axis(x, ids, -1)


def scatter(target: Any, ids: Any, values: Any) -> Any:
    """``target[r, ids[r, j]] = values[r, j]`` (or the one ``values``), in place; ``target`` returned."""
    if is_torch(target):
        return target.scatter_(-1, ids, values)
    np.put_along_axis(target, ids, values, -1)
    return target


def sort_stable(x: Any) -> tuple[Any, Any]:
    """Each row ascending, equal entries in index order: (sorted values, their indices)."""
    if is_torch(x):
        import torch

        return torch.sort(x, descending=False, dim=-1, stable=True)
    order = np.argsort(x, axis=-1, kind="stable")
    return np.take_along_axis(x, order, -1), order


def topk(x: Any, k: int) -> tuple[Any, Any]:
    """Each row's ``k`` largest entries, largest first: (values, indices). Which of entries equal to
    the k-th comes back is not promised (the caller reads the values to see ties); NumPy's lists equal
    entries lowest index first."""
    if is_torch(x):
        import torch

        top = torch.topk(x, k, dim=-1)
        return top.values, top.indices
    width = x.shape[-1]
    if k < width:  # the k largest at the end of a partition (no negated copy: 65 rows of 152k are 40 MB)
        ids = np.sort(np.argpartition(x, width - k, axis=-1)[..., width - k :], axis=-1)
    else:
        ids = np.broadcast_to(np.arange(width), x.shape)
    values = np.take_along_axis(x, ids, -1)
    order = np.argsort(-values, axis=-1, kind="stable")
    return np.take_along_axis(values, order, -1), np.take_along_axis(ids, order, -1)
