"""The torch backend on a static KV cache (engine/backends/pytorch/static_cache.py): every step of a bucket has one
shape, so on CUDA its forward is captured once as a CUDA graph and replayed (engine/backends/pytorch/step_graphs.py),
and the decode loop no longer waits on Python and kernel launches. Where graphs are unavailable
(CPU, MPS) or fail, the same steps run eagerly, and ``graphs_note`` says why."""

from __future__ import annotations

import numpy as np
import torch

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.base import Verified
from draftscope.engine.backends.pytorch.attention import step_kernels
from draftscope.engine.backends.pytorch.fused import fuse_attention, fuse_mlps
from draftscope.engine.backends.pytorch.static_cache import (
    BUCKETS,
    FIRST_SPAN,
    StaticTreeCache,
    additive_mask,
    bucket_for,
    span_for,
    spans_for,
    step_layout,
)
from draftscope.engine.backends.pytorch.step_graphs import StepGraphs, capture
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend

TREE_ROOM = max(BUCKETS) + 1  # slots past the context's end a padded step may write
# Every step reads the whole buffer (masked): a model's full 32k context would make each step read
# it all, so answers get this many positions on this backend.
STATIC_CONTEXT = 8192


def _has_triton() -> bool:
    try:
        from torch.utils._triton import has_triton  # noqa: PLC0415  # torch's private module: may be absent
    except ImportError:
        return False
    return bool(has_triton())


class StaticTorchBackend(TorchBackend):
    saves_slots = False  # its buffers are copied in place for its graphs: not saved on disk (yet)
    max_tree = max(BUCKETS)  # the room past the context's end (TREE_ROOM) holds a tree this big
    _cache: StaticTreeCache  # made at load, released by close

    def __init__(
        self,
        model,
        tokenizer,
        *,
        graphs: str | None = None,
        first_span: int = FIRST_SPAN,
        progress=None,
        compiled: bool | None = None,
        attention: str | None = None,
        **kwargs,
    ) -> None:
        """``graphs``: "cuda" (capture each bucket's step as a CUDA graph), "off", or "eager" (the
        graphs' buffers replayed without a graph: for tests on a CPU); None: "cuda" on CUDA, else off.
        ``first_span``: the shortest span of keys a step reads (static_cache.spans_for).
        ``progress(text)`` hears how the capture goes (it takes seconds: 11 s for a 1.5B on an H200).
        ``compiled``: each step through torch.compile inside the capture; None: on CUDA where Triton
        is installed (inductor's GPU kernels need it), else not. ``attention``: the graphed steps' tree
        attention, "sdpa", "flex" or "auto" (step_graphs.capture); None: "auto" on CUDA (FlexAttention
        or cuDNN, whichever replays faster on this card), else "sdpa" (FlexAttention off a GPU runs
        PyTorch's reference code)."""
        super().__init__(model, tokenizer, **kwargs)
        self.max_context = min(self.max_context, STATIC_CONTEXT)
        layers = int(model.config.num_hidden_layers)
        self._cache = StaticTreeCache(layers, self.max_context + TREE_ROOM, self.device)
        self.spans = spans_for(self._cache.max_len, first_span)
        self._past = 0
        self.graphs: StepGraphs | None = None  # once captured
        self.graphs_note = "eager steps (no CUDA graphs on this device)"
        if graphs is None:
            graphs = "cuda" if torch.device(self.device).type == "cuda" else "off"
        self.fused_layers = self.fused_attention = 0  # layers whose gate/up and q/k/v products are one each
        if graphs != "off":
            # before the capture: the graphs record the fused products
            self.fused_layers = fuse_mlps(model)
            self.fused_attention = fuse_attention(model)

            if compiled is None:
                compiled = graphs == "cuda" and _has_triton()
            if attention is None:
                attention = "auto" if graphs == "cuda" else "sdpa"
            self.graphs, self.graphs_note = capture(
                self, replay=graphs, progress=progress, compiled=compiled, attention=attention
            )

    def describe(self) -> str:
        return f"{super().describe()} · static cache, {self.graphs_note}"

    # ------------------------------------------------------------------ the loop's calls

    @torch.inference_mode()
    def prefill(self, tokens: list[int], start: int, *, want_hidden: bool = False) -> torch.Tensor | None:
        cache = self._cache
        if start > self._past:
            raise ValueError(f"the cache holds {self._past} positions; a prefill from {start} does not follow")
        self.truncate(start)
        n = start + len(tokens)
        if not tokens:
            return None
        cache.slots = torch.arange(start, n, device=self.device)
        mask = None
        if start:  # the new tokens see the kept prefix and each other causally: a mask over the span
            span = span_for(self.spans, n)
            own = torch.ones(n - start, n - start, dtype=torch.bool, device=self.device).tril()
            mask = additive_mask(own, start, span, self.dtype)
            cache.view = span
        else:
            cache.view = n  # the prompt sees itself only, causally: flash attention, no mask
        try:
            with step_kernels(self.kernel_device, tree=mask is not None):
                out = self.model(
                    input_ids=torch.tensor([list(tokens)], device=self.device),
                    position_ids=torch.arange(start, n, device=self.device)[None],
                    attention_mask=mask,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                    output_hidden_states=want_hidden,
                )
        finally:
            cache.view = None
        self._past = cache.past = n
        self.held.read(0, start, tokens)
        return out.hidden_states[-1][0, -1] if want_hidden else None

    @torch.inference_mode()
    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        self.held.verifying(0, root, tree.tokens)
        n = len(tree)
        padded = bucket_for(n)
        past = self._past
        if past + padded + 1 > self._cache.max_len:
            raise ValueError(f"the static cache holds {self._cache.max_len:,} positions: no room for this step")
        positions, allowed, _real = step_layout(tree, past, padded)
        ids = np.zeros(padded + 1, dtype=np.int64)
        ids[0] = root
        ids[1 : n + 1] = tree.tokens
        ids[n + 1 :] = root  # padding nodes: any token will do, nothing reads their rows
        inputs = (torch.from_numpy(ids)[None], torch.from_numpy(past + positions)[None], torch.from_numpy(allowed))
        self._last_padded = padded
        span = span_for(self.spans, past + padded + 1)
        if self.graphs is not None and self.graphs.has(padded, span):
            logits, hidden, best = self.graphs.run(padded, span, past, *inputs)
            return Verified(
                logits[: n + 1, : self.vocab].clone(),
                hidden[: n + 1].clone() if want_hidden else None,
                best[: n + 1].clone(),
            )
        return self._eager_step(past, *inputs, span=span, want_hidden=want_hidden, rows=n + 1)

    def _eager_step(
        self, past: int, ids, positions, allowed, *, span: int, want_hidden: bool = False, rows: int
    ) -> Verified:
        cache = self._cache
        q = ids.shape[1]
        cache.slots = torch.arange(past, past + q, device=self.device)
        mask = additive_mask(allowed.to(self.device), past, span, self.dtype)
        cache.view = span
        try:
            with step_kernels(self.kernel_device, tree=True):
                out = self.model(
                    input_ids=ids.to(self.device),
                    position_ids=positions.to(self.device),
                    attention_mask=mask,
                    past_key_values=cache,
                    use_cache=True,
                    output_hidden_states=want_hidden,
                )
        finally:
            cache.view = None
        hidden = out.hidden_states[-1][0, :rows] if want_hidden else None
        return Verified(out.logits[0, :rows, : self.vocab], hidden)

    @torch.inference_mode()
    def commit(self, path: list[int]) -> None:
        base = self._past + 1
        if path != list(range(len(path))):  # a chain from the first node is already in place
            self._cache.move([base + i for i in path], list(range(base, base + len(path))))
        self.held.committed(0, self._past, path)
        self._past += 1 + len(path)
        self._cache.past = self._past

    def truncate(self, length: int) -> None:
        self._past = min(self._past, length)  # what lies past it is masked out, and overwritten later
        self._cache.past = self._past
        self.held.cut(0, length)

    def close(self) -> None:
        self.graphs = None
        self._cache = None  # type: ignore[assignment]  # closed: nothing steps on it again
