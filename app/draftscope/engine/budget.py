"""How many draft nodes to verify per step.

The cost of one verify pass as a function of tree size is measured once per model and device
(``measure_verify_costs``) and then kept fresh from the steps actually run (a load spike during
the measurement must not switch speculation off for good). Acceptance is modelled as
``accepted(n) = alpha * log2(1 + n)``, with ``alpha`` an exponential average of what the last
steps achieved. Each step picks the size that maximises expected tokens per second,
``(1 + accepted(n)) / cost(n)``; size 0 is plain decoding, chosen when speculation does not pay.
While plain decoding wins, every ``explore_every``-th step still tries the best tree size, so
both the acceptance and the cost estimates keep learning.
"""

from __future__ import annotations

import math
import time

import torch

SIZES = (0, 2, 4, 8, 16, 32, 64)


class AdaptiveBudget:
    def __init__(self, costs: dict[int, float], *, alpha: float = 0.8, smoothing: float = 0.3, max_size: int = 64,
                 explore_every: int = 8) -> None:
        self.costs = {n: c for n, c in sorted(costs.items()) if n <= max_size}
        self.alpha = alpha
        self.smoothing = smoothing
        self.explore_every = explore_every
        self._plain_streak = 0

    def cost(self, n: int) -> float:
        sizes = list(self.costs)
        if n in self.costs:
            return self.costs[n]
        hi = next((s for s in sizes if s >= n), sizes[-1])
        lo = max((s for s in sizes if s <= n), default=sizes[0])
        if hi == lo:
            return self.costs[hi]
        w = (n - lo) / (hi - lo)
        return self.costs[lo] * (1 - w) + self.costs[hi] * w

    def _rate(self, n: int) -> float:
        return (1 + self.alpha * math.log2(1 + n)) / self.costs[n]

    def choose(self) -> int:
        best = max(self.costs, key=self._rate)
        if best == 0:
            self._plain_streak += 1
            if self.explore_every and self._plain_streak % self.explore_every == 0:
                return max((n for n in self.costs if n > 0), key=self._rate, default=0)
        else:
            self._plain_streak = 0
        return best

    def update(self, tree_size: int, accepted: int, seconds: float | None = None) -> None:
        if seconds is not None and seconds > 0:
            nearest = min(self.costs, key=lambda n: abs(n - tree_size))
            self.costs[nearest] += self.smoothing * (seconds - self.costs[nearest])
        if tree_size <= 0:
            return
        observed = accepted / math.log2(1 + tree_size)
        self.alpha += self.smoothing * (observed - self.alpha)


class FixedBudget:
    def __init__(self, size: int) -> None:
        self.size = size

    def choose(self) -> int:
        return self.size

    def update(self, tree_size: int, accepted: int, seconds: float | None = None) -> None:
        pass


@torch.inference_mode()
def measure_verify_costs(model, device, *, context: int = 256, sizes=SIZES, repeats: int = 3) -> dict[int, float]:
    """Seconds for one forward of 1 + n tokens (root + chain of n) over a ``context``-token cache."""
    from transformers import DynamicCache

    from draftscope.draft_tree import DraftTree
    from draftscope.engine.tree_attention import crop_cache, tree_inputs

    import numpy as np

    vocab = model.config.vocab_size
    dtype = next(model.parameters()).dtype
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, context), generator=gen).to(device)
    cache = DynamicCache()
    model(input_ids=prompt, past_key_values=cache, use_cache=True)
    costs = {}
    for n in sizes:
        tree = DraftTree(
            tokens=np.random.default_rng(n).integers(0, vocab, size=n),
            parents=np.arange(-1, n - 1, dtype=np.int32),
            depth=np.arange(1, n + 1, dtype=np.int32),
            support=np.ones(n, np.float32),
            source=np.ones(n, np.int8),
        )
        ids, pos, mask = tree_inputs(1, tree, context, device, dtype)
        best = float("inf")
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
            crop_cache(cache, context)
        costs[n] = best
    return costs
