"""A faster layout for linear layers on CPUs whose BLAS multiplies a few rows slowly.

With MKL on an AVX2 EPYC, ``x @ W.T`` (how ``nn.Linear`` computes) for 2 to 16 rows costs 2-3x one
row, while ``(W @ x.T).T`` (the same product laid out the other way) costs about one row's price
up to 4 rows and half of ``x @ W.T`` at 16 (1536x8960 fp32: 4 rows 7.5 ms vs 2.2 ms). Tree
verification multiplies a few rows at every step, so this decides whether speculation can pay on
such a CPU. The switch is made per model after a short probe at load (the whole model's forward over 2, 4 and
8 positions, both layouts) shows it is faster here; the product is the same up to float rounding.
SmolLM2-135M here: a 2-token forward costs 1.7x a 1-token one with the usual layout, 0.9-1.0x
with the transposed one.
"""

from __future__ import annotations

import time
import types

import torch

MIN_GAIN = 1.3  # switch only when the probe finds the other layout this much faster


def _transposed_forward(self, x: torch.Tensor) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])
    y = torch.mm(self.weight, rows.t()).t()
    if self.bias is not None:
        y = y + self.bias
    return y.contiguous().reshape(*x.shape[:-1], self.weight.shape[0])


def _set_layout(linears, transposed: bool) -> None:
    for m in linears:
        if transposed:
            m.forward = types.MethodType(_transposed_forward, m)
        else:
            m.__dict__.pop("forward", None)


def _probe(model, linears, rows=(2, 4, 8), repeats: int = 2) -> float:
    """Time of the model's forward over a few positions (what a verify step runs) with the usual
    layout over that with the transposed one; best of alternating runs, summed over ``rows``.
    The whole model is timed: a single matrix's timing misleads (a small model's head and body
    gain differently, and timings of a few microseconds are noise)."""
    best = {False: {r: float("inf") for r in rows}, True: {r: float("inf") for r in rows}}
    with torch.inference_mode():
        for _ in range(repeats):
            for transposed in (False, True):
                _set_layout(linears, transposed)
                for r in rows:
                    ids = torch.zeros(1, r, dtype=torch.long)
                    t0 = time.perf_counter()
                    model(input_ids=ids, use_cache=False)
                    best[transposed][r] = min(best[transposed][r], time.perf_counter() - t0)
    _set_layout(linears, False)
    return sum(best[False].values()) / sum(best[True].values())


def use_fast_layout(model) -> str:
    """Switch ``model``'s linear layers to the transposed layout when that is faster on this CPU;
    returns what was decided, in words (empty for a model not on the CPU)."""
    if getattr(model, "hf_quantizer", None) is not None:
        return ""
    # plain nn.Linear only: subclasses (routers, quantised or decoupled layers) do more than x @ W.T
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    if not linears or linears[0].weight.device.type != "cpu":
        return ""
    gain = _probe(model, linears)
    if gain < MIN_GAIN:
        return f"linear layers as usual (the transposed layout measured {gain:.2f}x)"
    _set_layout(linears, True)
    return f"transposed linear layout ({gain:.1f}x faster for a verify step's few positions on this CPU)"
