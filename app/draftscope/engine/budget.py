"""The verify cost curve (seconds per forward by tree size, measured once per model and device)
and the fixed tree size used by benchmarks and tests; the adaptive per-step policy is in
:mod:`draftscope.engine.policy`."""

from __future__ import annotations

import time

import torch

from draftscope.draft_tree import DraftTree

SIZES = (0, 2, 4, 8, 16, 32, 64)


class FixedBudget:
    """Ask for ``size`` nodes every step and verify all of them (no policy)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.last = None

    def draft_budget(self) -> int:
        return self.size

    def trim(self, tree: DraftTree, asked: int | None = None) -> DraftTree:
        return tree

    def update(self, tree: DraftTree, path: list[int], **_) -> None:
        pass


def monotone(costs: dict[int, float]) -> dict[int, float]:
    """A bigger tree never costs less than a smaller one: a smaller tree can always be verified at
    the price of a bigger one, so each size costs at most what any larger size measured (timing
    noise otherwise makes one size look dearer than the next and the policy avoids it)."""
    out, cheapest = {}, float("inf")
    for n in sorted(costs, reverse=True):
        cheapest = min(cheapest, costs[n])
        out[n] = cheapest
    return dict(sorted(out.items()))


@torch.inference_mode()
def measure_verify_costs(model, device, *, context: int = 256, sizes=SIZES, repeats: int = 3) -> dict[int, float]:
    """Seconds for one forward of 1 + n tokens (root + chain of n) over a ``context``-token cache:
    the best of ``repeats`` rounds, each round over every size (a load spike then hits one round,
    not every try of one size), made monotone in n."""
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
    inputs = {}
    for n in sizes:
        tree = DraftTree(
            tokens=np.random.default_rng(n).integers(0, vocab, size=n),
            parents=np.arange(-1, n - 1, dtype=np.int32),
            depth=np.arange(1, n + 1, dtype=np.int32),
            support=np.ones(n, np.float32),
            source=np.ones(n, np.int8),
        )
        inputs[n] = tree_inputs(1, tree, context, device, dtype)
    best = {n: float("inf") for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            ids, pos, mask = inputs[n]
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            best[n] = min(best[n], time.perf_counter() - t0)
            crop_cache(cache, context)
    return monotone(best)
