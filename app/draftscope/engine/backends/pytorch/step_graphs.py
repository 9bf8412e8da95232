"""Each bucket's step of the static-cache backend captured once as a CUDA graph and replayed, so a
step costs the GPU's work rather than ~1,000 kernel launches from Python.

A graph reads its inputs from buffers fixed at capture (tokens, positions, the mask, the cache
slots it writes) and leaves its logits in a fixed buffer; a step copies its inputs into them and
replays. Capture happens once, at load (the first answer never pays for it): a graph for each tree
size over each span of keys (static_cache.spans_for); graphs whose logits disagree with the eager
step's (the math kernel) are recaptured on the math kernel. ``replay="eager"`` runs the same buffers
through the model without a graph: the plumbing, testable on a CPU.

The check at capture runs a branching tree (siblings under the root and under a node) padded to
each bucket's size, so a kernel that reads the tree mask as plain causal, or lets real nodes see
the padding, is caught. Its tolerance, 3% of the largest logit, sits 1.7x below the smallest error
it must catch (5%, tests/engine/test_static_cache.py) and 1.6x above the largest drift measured between
two right bf16 kernels (1.8%: SmolLM2-135M's real weights, SDPA flash against math on the CPU;
scripts/measure_capture_tolerance.py, docs/benchmarks.md); at 2% that drift came within 10% of it.
Each graph gives the last hidden state too (the recurrent drafter's input), so those steps replay
as well; ``replays`` counts the steps answers ran through the graphs (the check's own are not).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from draftscope.draft_tree import tree_from_parents
from draftscope.engine.backends.pytorch.attention import GRAPH_FALLBACK, NAMES, kernels_for, step_kernels
from draftscope.engine.backends.pytorch.static_cache import BUCKETS, fill_additive_mask, span_for, step_layout

if TYPE_CHECKING:
    from draftscope.engine.backends.pytorch.flex_tree import TreeMask

# a step's outputs: logits [1, q, vocab], last hidden states [1, q, hidden], each row's argmax [1, q]
Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

CHECK_PROMPT = range(11, 27)  # the prompt of the capture's check (16 tokens)
# The check's tree: two siblings under the root, two under the first, one deeper (parents first, so
# every prefix of it is a tree); a bucket of size p checks its first min(p - 1, 6) nodes, padded.
CHECK_TREE = ((5, -1), (6, -1), (7, 0), (8, 0), (9, 1), (10, 2))
CHECK_TOLERANCE = 3e-2  # of the largest logit (see the module's docstring)
TIMED_CONTEXT = 2000  # the cache length at which "auto" times FlexAttention's graphs against SDPA's


@dataclass
class _Bucket:
    span: int  # the keys its attention reads: slots [0, span)
    ids: torch.Tensor  # [1, q]
    positions: torch.Tensor  # [1, q]
    slots: torch.Tensor  # [q]
    mask: torch.Tensor | TreeMask  # [1, 1, q, span] additive (SDPA), or FlexAttention's: filled on the device
    past: torch.Tensor  # the cache length (a device scalar): slots and mask follow from it inside the graph
    own: torch.Tensor  # [q, q] what the step's own slots see of each other (the tree's ancestors, itself)
    steps: torch.Tensor  # arange(q)
    keys: torch.Tensor  # arange(span)
    replay: Callable[[], Outputs] = field(init=False)  # the step: its graph replayed (set once captured)

    @property
    def attention_mask(self):
        return getattr(self.mask, "block_mask", self.mask)


def _model_step(model, cache, ids, positions, mask):
    """One step's forward: the decoder, then the head on its last hidden states (both are wanted;
    ``output_hidden_states`` would collect every layer's through hooks that torch.compile cannot
    trace)."""
    hidden = model.get_decoder()(
        input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=cache, use_cache=True
    ).last_hidden_state
    return model.get_output_embeddings()(hidden), hidden


class StepGraphs:
    """One graph per (tree size, span of keys), all on the attention ``kernels`` (None: PyTorch's).
    ``compiled``: each step's forward through torch.compile (inductor, fullgraph, static shapes: one
    fused graph per bucket; on a CPU inductor's C++ backend) inside the capture."""

    def __init__(
        self, backend, *, replay: str = "cuda", kernels=None, compiled: bool = False, flex: bool = False
    ) -> None:
        self.backend = backend
        self.mode = replay
        self.kernels = kernels
        self.compiled = compiled
        self.flex = flex  # tree attention on FlexAttention (flex_tree.py): the model's attention function is ours
        if flex:
            from draftscope.engine.backends.pytorch.flex_tree import register  # noqa: PLC0415  # FlexAttention: ~1 s

            backend.model.set_attn_implementation(register())
        self.buckets: dict[tuple[int, int], _Bucket] = {}
        self._pool: torch.cuda._POOL_HANDLE | None = None  # the graphs' memory pool, shared
        self.replays = 0  # steps of answers run through the graphs
        self._step = _model_step
        if compiled:
            import torch._dynamo  # noqa: PLC0415  # seconds to import: compiled steps only

            # a recompile per (tree size, span): well above what capture makes, so none falls back
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
            self._step = torch.compile(_model_step, fullgraph=True, dynamic=False)

    def span_of(self, span: int) -> int:
        """The span of keys whose graph runs a step over ``span``: on FlexAttention the whole buffer
        (it visits only the blocks its mask lists, so shorter spans would buy nothing), else ``span``."""
        return self.backend.spans[-1] if self.flex else span

    def has(self, padded: int, span: int) -> bool:
        return (padded, self.span_of(span)) in self.buckets

    def _fill(self, b: _Bucket) -> None:
        """The step's slots and mask from its cache length and tree, on the device (in the graph)."""
        torch.add(b.steps, b.past, out=b.slots)
        if isinstance(b.mask, torch.Tensor):  # SDPA's additive mask
            fill_additive_mask(b.mask, b.past, b.own, b.keys)
        else:  # FlexAttention's TreeMask
            b.mask.fill(b.past, b.own)

    def _forward(self, b: _Bucket):
        backend = self.backend
        cache = backend._cache
        self._fill(b)
        cache.slots, cache.view = b.slots, b.span  # the layers write where this buffer says, read the span
        try:
            with step_kernels(backend.kernel_device, tree=True, kernels=self.kernels):
                logits, hidden = self._step(backend.model, cache, b.ids, b.positions, b.attention_mask)
        finally:
            cache.view = None
        return logits, hidden, logits[..., : backend.vocab].argmax(-1)  # greedy's tokens, without a copy of the rows

    @torch.inference_mode()
    def add(self, padded: int, span: int) -> None:
        backend = self.backend
        device, q = backend.device, padded + 1
        mask: torch.Tensor | TreeMask
        if self.flex:
            from draftscope.engine.backends.pytorch.flex_tree import TreeMask  # noqa: PLC0415  # FlexAttention: ~1 s

            mask = TreeMask(q, span, device)
        else:
            mask = torch.zeros(1, 1, q, span, dtype=backend.dtype, device=device)
        b = _Bucket(
            span,
            torch.zeros(1, q, dtype=torch.long, device=device),
            torch.zeros(1, q, dtype=torch.long, device=device),
            torch.arange(q, device=device),
            mask,
            past=torch.zeros((), dtype=torch.long, device=device),
            own=torch.ones(q, q, dtype=torch.bool, device=device).tril(),
            steps=torch.arange(q, device=device),
            keys=torch.arange(span, device=device),
        )
        if self.mode == "eager":
            b.replay = lambda: self._forward(b)
        else:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture: allocations, lazy set-up, cuDNN's plan
                for _ in range(2):
                    self._forward(b)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                out = self._forward(b)
            self._pool = graph.pool()

            def replay() -> Outputs:
                graph.replay()
                return out

            b.replay = replay
        self.buckets[padded, span] = b

    @torch.inference_mode()
    def run(self, padded: int, span: int, past: int, ids, positions, allowed) -> tuple[torch.Tensor, ...]:
        """The step's logits [q, vocab], last hidden states [q, hidden] and each row's most likely
        token [q] (views of the bucket's buffers: copy what you keep). What goes to the device: the
        ids, positions, the cache length and the tree's [q, q] mask; slots and the attention mask
        are made from them inside the graph."""
        span = self.span_of(span)
        b = self.buckets[padded, span]
        b.ids.copy_(ids)
        b.positions.copy_(positions)
        b.past.fill_(past)
        b.own.copy_(allowed)
        logits, hidden, best = b.replay()
        self.replays += 1
        return logits[0], hidden[0], best[0]


def capture(
    backend, *, replay: str = "cuda", buckets=BUCKETS, progress=None, compiled: bool = False, attention: str = "sdpa"
) -> tuple[StepGraphs | None, str]:
    """(graphs, a note in words) for ``backend`` (a StaticTorchBackend), or (None, why not): a graph
    for each tree size in ``buckets`` over each of the backend's spans. ``attention``: "sdpa" (the
    device's graph kernels, cuDNN on CUDA, or its fallback where those fail or their logits disagree
    with the math kernel's), "flex" (FlexAttention, flex_tree.py; SDPA's graphs where it fails or
    disagrees) or "auto" (both captured and timed here, the faster kept: the note gives both times).
    ``compiled``: first with each step compiled (torch.compile), and where that fails or disagrees,
    the same graphs uncompiled, the note saying why."""
    if replay == "cuda" and not torch.cuda.is_available():
        return None, "eager steps (CUDA graphs need a CUDA device)"
    if attention not in ("sdpa", "flex", "auto"):
        raise ValueError(f"attention must be sdpa, flex or auto, not {attention!r}")
    started = time.perf_counter()
    device_type = backend.kernel_device
    choices = [kernels_for(device_type, tree=True, graph=True)]
    if GRAPH_FALLBACK.get(device_type) and GRAPH_FALLBACK[device_type] != choices[0]:
        choices.append(GRAPH_FALLBACK[device_type])
    sdpa = ([(choices[0], True, False)] if compiled else []) + [(kernels, False, False) for kernels in choices]
    flex = [(None, True, True)] * compiled + [(None, False, True)]
    original = backend.model.config._attn_implementation
    failures: list[str] = []
    if attention != "auto":
        graphs, what = _first_that_runs(
            backend, flex + sdpa if attention == "flex" else sdpa, replay, buckets, progress, failures
        )
        timing = ""
    else:
        graphs, what = _first_that_runs(backend, flex, replay, buckets, progress, failures)
        other, other_what = _first_that_runs(backend, sdpa, replay, buckets, progress, failures)
        if graphs is None or other is None:
            graphs, what = (graphs, what) if other is None else (other, other_what)
            timing = ""
        else:
            context = min(TIMED_CONTEXT, backend._cache.max_len - max(buckets) - 2)
            times = {id(g): _replay_ms(g, context) for g in (graphs, other)}
            timing = f" (a step {times[id(graphs)]:.2f} ms on FlexAttention, {times[id(other)]:.2f} ms on SDPA)"
            if times[id(other)] < times[id(graphs)]:
                graphs, what = other, other_what
    if graphs is None or not graphs.flex:
        backend.model.set_attn_implementation(original)  # prompts and eager steps as before
    if graphs is None:
        return None, f"eager steps (CUDA graphs failed: {'; '.join(failures)})"
    kind = "CUDA graphs" if replay == "cuda" else "replayed buffers"
    kind += " of compiled steps" if graphs.compiled else ""
    tried = f"; {'; '.join(failures)}" if failures else ""
    return graphs, (
        f"{kind} on {what}{timing}: {len(graphs.buckets)} graphs (tree sizes x spans of keys) "
        f"captured in {time.perf_counter() - started:.1f} s{tried}"
    )


def _first_that_runs(backend, attempts, replay, buckets, progress, failures) -> tuple[StepGraphs | None, str]:
    """The first of ``attempts`` ((kernels, compiled, flex) each) whose graphs capture and pass the
    check, and its attention in words; each failure is added to ``failures``."""
    for kernels, compiling, flex in attempts:
        spans = backend.spans[-1:] if flex else backend.spans  # FlexAttention: one graph a tree size (span_of)
        shapes = [(p, s) for s in spans for p in buckets if p + 1 + len(CHECK_PROMPT) <= s]  # else no step fits
        name = "FlexAttention" if flex else f"{_kernel_name(kernels)} attention"
        what = f"{'compiled steps' if compiling else 'the decode steps'} on {name}"
        try:
            graphs = StepGraphs(backend, replay=replay, kernels=kernels, compiled=compiling, flex=flex)
            for done, (padded, span) in enumerate(shapes):
                if progress is not None and done % len(buckets) == 0:
                    progress(f"preparing {what}: {done} of {len(shapes)} captured")
                graphs.add(padded, span)
            _check(backend, graphs)
        except Exception as exc:  # any failure: the next attempt, else eager steps, and the user is told
            backend._cache.past = backend._past = 0
            backend._cache.view = None
            short = "FlexAttention" if flex else _kernel_name(kernels)
            failures.append(f"{'compiled on ' if compiling else ''}{short}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        return graphs, name
    return None, ""


@torch.inference_mode()
def _replay_ms(graphs: StepGraphs, context: int, repeats: int = 5) -> float:
    """A plain step and the largest tree at a cache of ``context`` positions, each on the graph a
    step there replays (SDPA's over that context's span, FlexAttention's over the whole buffer):
    the median of each, summed."""
    backend = graphs.backend
    sizes = sorted({p for p, _ in graphs.buckets})
    total = 0.0
    for padded in sorted({sizes[0], sizes[-1]}):
        span = graphs.span_of(span_for(backend.spans, context + padded + 1))
        b = graphs.buckets[padded, span]
        b.past.fill_(context)  # a chain's step at that length: what it reads is what is timed
        b.own.copy_(torch.ones_like(b.own).tril())
        times = []
        for _ in range(repeats + 2):
            if backend.device != "cpu" and torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            b.replay()
            if backend.device != "cpu" and torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        total += sorted(times[2:])[repeats // 2]
    graphs.replays = 0
    return total * 1000


def _kernel_name(kernels) -> str:
    return NAMES[kernels[0]] if kernels else "PyTorch's"


def check_tree(padded: int):
    """The capture check's tree for a bucket of ``padded`` nodes: branching, and padded."""
    nodes = CHECK_TREE[: max(0, min(padded - 1, len(CHECK_TREE)))]
    return tree_from_parents([t for t, _ in nodes], [p for _, p in nodes])


@torch.inference_mode()
def _check(backend, graphs: StepGraphs) -> None:
    """Every replayed step must give the eager step's logits (the eager step runs on the math kernel
    on CUDA): a short prompt and a branching tree padded to each tree size, over each span; on
    FlexAttention also a cache that crosses a block of keys (its block lists then hold a full block)."""
    from draftscope.engine.backends.pytorch.flex_tree import BLOCK  # noqa: PLC0415  # FlexAttention: ~1 s

    prompts = [CHECK_PROMPT] + ([range(11, 11 + BLOCK + 40)] if graphs.flex else [])
    for tokens in prompts:
        prompt = [int(t) % backend.vocab for t in tokens]
        if all(len(prompt) + padded + 1 <= span for padded, span in graphs.buckets):
            _check_at(backend, graphs, prompt)
    backend._cache.past = backend._past = 0
    graphs.replays = 0  # the check's own replays are not answers'


def _check_at(backend, graphs: StepGraphs, prompt: list[int]) -> None:
    backend.start(prompt)
    past = backend._past
    for padded, span in graphs.buckets:
        tree = check_tree(padded)
        positions, allowed, _ = step_layout(tree, past, padded)
        ids = np.full(padded + 1, prompt[-1], dtype=np.int64)
        ids[1 : len(tree) + 1] = tree.tokens % backend.vocab
        inputs = (torch.from_numpy(ids)[None], torch.from_numpy(past + positions)[None], torch.from_numpy(allowed))
        replayed = graphs.run(padded, span, past, *inputs)[0][: len(tree) + 1].float().clone()
        eager = backend._eager_step(past, *inputs, span=span, rows=len(tree) + 1).logits.float()
        scale = float(eager.abs().max()) or 1.0
        if not torch.allclose(replayed, eager, atol=CHECK_TOLERANCE * scale, rtol=0):
            raise RuntimeError(
                f"a replayed step ({padded} nodes over {span} keys) differs from the math kernel's "
                f"by {float((replayed - eager).abs().max()):.3g}"
            )
