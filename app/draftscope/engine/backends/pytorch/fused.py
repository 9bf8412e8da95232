"""Matrix products fused at load for the graphed static-cache steps (issue 42): each decoder
layer's MLP computes its gate and up projections as one product of their stacked weights, and its
attention its q, k and v projections as one, so a step launches one GEMM where there were two (and
three) and reads each weight matrix in one pass (on a GPU a step is bound by reading weights; in
CUDA graphs the launches are cheap, the reads are not merged by themselves).

transformers' attention forward calls q_proj, k_proj and v_proj one by one; rather than replace
that forward (rotary embedding, cache update, the kernel choice), the three become views of one
:class:`FusedProjections`: whichever is called first computes all three for that input and the
other two take their part, so the forward is transformers' own, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn


class GatedMLP(Protocol):
    """A decoder layer's MLP that :class:`FusedGateUpMLP` fuses (``_fusable`` checks one is)."""

    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Linear
    act_fn: Callable[[torch.Tensor], torch.Tensor]


class FusedGateUpMLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` with gate and up as one product: the same function, one GEMM."""

    def __init__(self, mlp: GatedMLP) -> None:
        super().__init__()
        gate, up = mlp.gate_proj, mlp.up_proj
        self.intermediate = gate.out_features
        self.gate_up_proj = nn.Linear(
            gate.in_features,
            gate.out_features + up.out_features,
            bias=False,
            device=gate.weight.device,
            dtype=gate.weight.dtype,
        )
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(torch.cat([gate.weight, up.weight]))
        self.down_proj, self.act_fn = mlp.down_proj, mlp.act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


class FusedProjections(nn.Module):
    """Several linear projections of the same input as one product of their stacked weights (and
    biases): ``part(x, i)`` gives projection i's part, the product computed once per input tensor."""

    def __init__(self, parts: list[nn.Linear]) -> None:
        super().__init__()
        first = parts[0]
        self.sizes = [p.out_features for p in parts]
        biased = any(p.bias is not None for p in parts)
        self.fused = nn.Linear(
            first.in_features, sum(self.sizes), bias=biased, device=first.weight.device, dtype=first.weight.dtype
        )
        with torch.no_grad():
            self.fused.weight.copy_(torch.cat([p.weight for p in parts]))
            if biased:
                self.fused.bias.copy_(
                    torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.out_features) for p in parts])
                )
        # the input being projected and its parts, until every part is taken: then nothing is kept, so
        # every forward starts from the same state (torch.compile's guards see no change between steps)
        self._input: torch.Tensor | None = None
        self._parts: tuple[torch.Tensor, ...] = ()
        self._left = 0

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if self._input is not x:
            self._input, self._parts, self._left = x, self.fused(x).split(self.sizes, dim=-1), len(self.sizes)
        out = self._parts[index]
        self._left -= 1
        if self._left == 0:
            self._input, self._parts = None, ()
        return out


class ProjectionPart(nn.Module):
    """One projection of a :class:`FusedProjections` (q_proj, k_proj or v_proj's place)."""

    shared: FusedProjections

    def __init__(self, shared: FusedProjections, index: int, original: nn.Linear) -> None:
        super().__init__()
        self.index = index
        self.in_features, self.out_features = original.in_features, original.out_features
        object.__setattr__(self, "shared", shared)  # not a child: the attention module owns it once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared.part(x, self.index)


def fuse_qkv(attention: nn.Module) -> bool:
    """q_proj, k_proj and v_proj of one attention module as one product; False where it has not
    those three linear projections of one input size (left as they are)."""
    found = [getattr(attention, name, None) for name in ("q_proj", "k_proj", "v_proj")]
    if isinstance(found[0], ProjectionPart):
        return True
    parts = [p for p in found if isinstance(p, nn.Linear)]
    if len(parts) != len(found) or len({p.in_features for p in parts}) != 1:
        return False
    attention.qkv_fused = FusedProjections(parts)
    for index, name in enumerate(("q_proj", "k_proj", "v_proj")):
        setattr(attention, name, ProjectionPart(attention.qkv_fused, index, parts[index]))
    return True


def _fusable(mlp: nn.Module) -> bool:
    found = [getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    parts = [p for p in found if isinstance(p, nn.Linear)]
    return (
        len(parts) == len(found)
        and hasattr(mlp, "act_fn")
        and parts[0].bias is None
        and parts[1].bias is None
        and parts[0].in_features == parts[1].in_features
    )


def fuse_mlps(model) -> int:
    """Fuse every decoder layer's gate and up projections in place; returns how many layers were
    fused (0 for architectures whose MLP is not gate/up/down, which keep theirs)."""
    fused = 0
    for layer in getattr(model.get_decoder(), "layers", []):
        mlp = getattr(layer, "mlp", None)
        if isinstance(mlp, FusedGateUpMLP):
            fused += 1
        elif mlp is not None and _fusable(mlp):
            layer.mlp = FusedGateUpMLP(mlp)
            fused += 1
    return fused


def fuse_attention(model) -> int:
    """Fuse every decoder layer's q, k and v projections in place; returns how many layers were fused."""
    return sum(
        fuse_qkv(layer.self_attn)
        for layer in getattr(model.get_decoder(), "layers", [])
        if getattr(layer, "self_attn", None) is not None
    )
