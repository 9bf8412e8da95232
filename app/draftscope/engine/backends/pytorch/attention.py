"""Which attention kernel each step of the torch backend runs on, chosen here rather than left to
PyTorch's per-call dispatch.

On CUDA, ``scaled_dot_product_attention`` with an arbitrary (tree) mask goes to cuDNN attention,
which builds an execution plan for every (query length, key length) it meets: on an H100 the first
tree step at each new cache length took 0.5-1.2 s and later ones 3-4x a plain step; in a
conversation every length is new. So tree steps run on a kernel that takes any mask and plans
nothing per shape (the math kernel: on the same card a 64-node tree step cost 1.4x a plain step),
and plain steps and prefill (no mask) on flash attention. Elsewhere PyTorch's own choice is kept:
the CPU's kernels plan nothing per shape.

Steps replayed as CUDA graphs (the static cache) are the exception: each graph has one shape (a
tree size over a fixed span of keys), so cuDNN plans once per graph, at capture, never while
answering. There cuDNN is the fastest kernel measured: on an H200 (1.5B shape, bf16, 2026-11-26) a
plain step cost 5.7 ms on cuDNN against 10.0 on math, a 64-node tree 15.6 against 23.2; the math
kernel computes in fp32 and its small-query batched matmul dominated the tree steps
(docs/gpu-runs/2026-11-26-h200/prof.txt). A graph's logits are checked against the math kernel's at
capture (engine/backends/pytorch/step_graphs.py), and the math kernel takes over where they disagree.
"""

from __future__ import annotations

import contextlib

from torch.nn.attention import SDPBackend, sdpa_kernel

# Per device type: (plain steps and prefill, tree steps); None: PyTorch's own dispatch.
# The lists are in order of preference; the first kernel that supports the call runs.
KERNELS: dict[str, tuple[list[SDPBackend] | None, list[SDPBackend] | None]] = {
    "cuda": ([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH], [SDPBackend.MATH]),
}


# Per device type: the kernels of steps captured as graphs (one shape each), in order of preference.
GRAPH_KERNELS: dict[str, list[SDPBackend]] = {"cuda": [SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]}
# What a graph falls back to when its first choice's logits disagree with the math kernel's.
GRAPH_FALLBACK: dict[str, list[SDPBackend]] = {"cuda": [SDPBackend.MATH]}


def kernels_for(device_type: str, *, tree: bool, graph: bool = False) -> list[SDPBackend] | None:
    """The kernels a step may use on ``device_type`` ("cuda", "cpu", "mps"): ``tree`` for a step
    whose queries carry a tree mask, ``graph`` for one captured as a graph (every shape fixed)."""
    if graph:
        return GRAPH_KERNELS.get(device_type)
    plain, tree_kernels = KERNELS.get(device_type, (None, None))
    return tree_kernels if tree else plain


def step_kernels(device_type: str, *, tree: bool, kernels: list[SDPBackend] | None = None):
    """A context in which the step's attention runs on :func:`kernels_for`'s kernels (or on
    ``kernels``, where the caller chose them: a graph's capture)."""
    chosen = kernels if kernels is not None else kernels_for(device_type, tree=tree)
    return sdpa_kernel(chosen) if chosen else contextlib.nullcontext()


NAMES = {
    SDPBackend.FLASH_ATTENTION: "flash",
    SDPBackend.EFFICIENT_ATTENTION: "mem-efficient",
    SDPBackend.MATH: "math",
    SDPBackend.CUDNN_ATTENTION: "cuDNN",
}


def kernel_names(device_type: str) -> str:
    """In words, for the status bar and benchmarks: "flash / math (tree steps)" or "PyTorch's choice"."""
    plain, tree = (kernels_for(device_type, tree=t) for t in (False, True))
    if plain is None or tree is None:  # KERNELS lists both for a device, or neither
        return "PyTorch's attention choice"
    return f"{NAMES[plain[0]]} attention, {NAMES[tree[0]]} for trees"
