"""Each bucket's step of the static-cache backend captured once as a CUDA graph and replayed, so a
step costs the GPU's work rather than ~1,000 kernel launches from Python.

A graph reads its inputs from buffers fixed at capture (tokens, positions, the mask, the cache
slots it writes) and leaves its logits in a fixed buffer; a step copies its inputs into them and
replays. Capture happens once, at load (the first answer never pays for it); a graph whose logits
disagree with the eager step's at capture is not used. ``replay="eager"`` runs the same buffers
through the model without a graph: the plumbing, testable on a CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from draftscope.engine.attention import step_kernels
from draftscope.engine.static_cache import BUCKETS, additive_mask


@dataclass
class _Bucket:
    ids: torch.Tensor  # [1, q]
    positions: torch.Tensor  # [1, q]
    slots: torch.Tensor  # [q]
    mask: torch.Tensor  # [1, 1, q, max_len]
    replay: object  # () -> logits [1, q, vocab]


class StepGraphs:
    def __init__(self, backend, *, replay: str = "cuda") -> None:
        self.backend = backend
        self.mode = replay
        self.buckets: dict[int, _Bucket] = {}
        self._pool = None

    def _forward(self, b: _Bucket):
        backend = self.backend
        backend._cache.slots = b.slots  # the layers write where this buffer says
        with step_kernels(backend.kernel_device, tree=True):
            return backend.model(input_ids=b.ids, position_ids=b.positions, attention_mask=b.mask,
                                 past_key_values=backend._cache, use_cache=True).logits

    @torch.inference_mode()
    def add(self, padded: int) -> None:
        backend = self.backend
        device, q, max_len = backend.device, padded + 1, backend._cache.max_len
        b = _Bucket(torch.zeros(1, q, dtype=torch.long, device=device), torch.zeros(1, q, dtype=torch.long, device=device),
                    torch.arange(q, device=device), torch.zeros(1, 1, q, max_len, dtype=backend.dtype, device=device), None)
        if self.mode == "eager":
            b.replay = lambda: self._forward(b)
        else:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture: allocations and lazy set-up happen here
                for _ in range(2):
                    self._forward(b)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                out = self._forward(b)
            self._pool = graph.pool()
            b.replay = lambda: (graph.replay(), out)[1]
        self.buckets[padded] = b

    @torch.inference_mode()
    def run(self, padded: int, past: int, ids, positions, allowed) -> torch.Tensor:
        """The step's logits [q, vocab] (a view of the bucket's buffer: copy what you keep)."""
        b = self.buckets[padded]
        cache = self.backend._cache
        b.ids.copy_(ids)
        b.positions.copy_(positions)
        b.slots.copy_(torch.arange(past, past + padded + 1))
        b.mask.copy_(additive_mask(allowed.to(b.mask.device), past, cache.max_len, b.mask.dtype))
        return b.replay()[0]


def capture(backend, *, replay: str = "cuda", buckets=BUCKETS) -> tuple[StepGraphs | None, str]:
    """(graphs, a note in words) for ``backend`` (a StaticTorchBackend), or (None, why not)."""
    if replay == "cuda" and not torch.cuda.is_available():
        return None, "eager steps (CUDA graphs need a CUDA device)"
    started = time.perf_counter()
    graphs = StepGraphs(backend, replay=replay)
    try:
        for padded in buckets:
            graphs.add(padded)
        _check(backend, graphs)
    except Exception as exc:  # noqa: BLE001 - any failure: the same steps run eagerly, and the user is told
        backend._cache.past = backend._past = 0
        return None, f"eager steps (CUDA graphs failed: {type(exc).__name__}: {str(exc)[:120]})"
    kind = "CUDA graphs" if replay == "cuda" else "replayed buffers"
    return graphs, f"{kind}: {len(buckets)} tree sizes captured in {time.perf_counter() - started:.1f} s"


@torch.inference_mode()
def _check(backend, graphs: StepGraphs) -> None:
    """A replayed step must give the eager step's logits (a short prompt, a chain and a plain step)."""
    import numpy as np

    from draftscope.engine.backends.base import chain_tree
    from draftscope.engine.static_cache import step_layout

    prompt = [int(t) % backend.vocab for t in range(11, 27)]
    for tree in (chain_tree([5, 6, 7]), chain_tree([])):
        padded = min(b for b in graphs.buckets if b >= len(tree))
        backend.start(prompt)
        past = backend._past
        positions, allowed, _ = step_layout(tree, past, padded)
        ids = np.full(padded + 1, prompt[-1], dtype=np.int64)
        ids[1 : len(tree) + 1] = tree.tokens
        inputs = (torch.from_numpy(ids)[None], torch.from_numpy(past + positions)[None], torch.from_numpy(allowed))
        replayed = graphs.run(padded, past, *inputs)[: len(tree) + 1].float().clone()
        eager = backend._eager_step(past, *inputs, rows=len(tree) + 1).logits.float()
        scale = float(eager.abs().max()) or 1.0
        if not torch.allclose(replayed, eager, atol=2e-2 * scale, rtol=0):
            raise RuntimeError(f"a replayed step differs from the eager one by {float((replayed - eager).abs().max()):.3g}")
    backend._cache.past = backend._past = 0
