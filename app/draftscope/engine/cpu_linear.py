"""A faster layout for linear layers on CPUs whose BLAS multiplies a few rows slowly.

With MKL on an AVX2 EPYC, ``x @ W.T`` (how ``nn.Linear`` computes) for 2 to 16 rows costs 2-3x one
row, while ``(W @ x.T).T`` (the same product laid out the other way) costs about one row's price
up to 4 rows and half of ``x @ W.T`` at 16 (1536x8960 fp32: 4 rows 7.5 ms vs 2.2 ms). Tree
verification multiplies a few rows at every step, so this decides whether speculation can pay on
such a CPU. The switch is made per model after a short probe at load shows it is faster here; the
product is the same up to float rounding.
"""

from __future__ import annotations

import time
import types

import torch
import torch.nn.functional as F

MIN_GAIN = 1.3  # switch only when the probe finds the other layout this much faster


def _transposed_forward(self, x: torch.Tensor) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])
    y = torch.mm(self.weight, rows.t()).t()
    if self.bias is not None:
        y = y + self.bias
    return y.contiguous().reshape(*x.shape[:-1], self.weight.shape[0])


def _probe(weight: torch.Tensor, rows: int = 8, repeats: int = 5) -> float:
    """Time of ``x @ W.T`` over time of ``(W @ x.T).T`` for a few rows (best of alternating runs)."""
    x = torch.ones(rows, weight.shape[1], dtype=weight.dtype)
    best = [float("inf"), float("inf")]
    with torch.inference_mode():
        for _ in range(repeats):
            for i, f in enumerate((lambda: F.linear(x, weight), lambda: torch.mm(weight, x.t()).t().contiguous())):
                t0 = time.perf_counter()
                f()
                best[i] = min(best[i], time.perf_counter() - t0)
    return best[0] / best[1]


def use_fast_layout(model) -> str:
    """Switch ``model``'s linear layers to the transposed layout when that is faster on this CPU;
    returns what was decided, in words (empty for a model not on the CPU)."""
    if getattr(model, "hf_quantizer", None) is not None:
        return ""
    # plain nn.Linear only: subclasses (routers, quantised or decoupled layers) do more than x @ W.T
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    if not linears or linears[0].weight.device.type != "cpu":
        return ""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = [m for m in linears if m is not head] or linears
    gain = _probe(max(body, key=lambda m: m.weight.numel()).weight)
    if gain < MIN_GAIN:
        return f"linear layers as usual (the transposed layout measured {gain:.2f}x)"
    for m in linears:
        m.forward = types.MethodType(_transposed_forward, m)
    return f"transposed linear layout ({gain:.1f}x faster for a few rows on this CPU)"
