"""Matrix products fused at load for the graphed static-cache steps (issue 42): each decoder
layer's MLP computes its gate and up projections as one product of their stacked weights, so a
step launches one GEMM where there were two and reads one weight matrix (on a GPU the step is
bound by reading weights; on CUDA graphs the launches are cheap, the reads are not merged by
themselves).

Only the MLP: the attention's q/k/v projections are called by transformers' own attention
forward one by one, and fusing them would mean replacing that forward (rotary embedding, cache
update, the kernel choice) with ours — left for when it is measured on a card.
"""

from __future__ import annotations

import torch
from torch import nn


class FusedGateUpMLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` with gate and up as one product: the same function, one GEMM."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        gate, up = mlp.gate_proj, mlp.up_proj
        self.intermediate = gate.out_features
        self.gate_up_proj = nn.Linear(gate.in_features, gate.out_features + up.out_features, bias=False,
                                      device=gate.weight.device, dtype=gate.weight.dtype)
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(torch.cat([gate.weight, up.weight]))
        self.down_proj, self.act_fn = mlp.down_proj, mlp.act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


def _fusable(mlp: nn.Module) -> bool:
    parts = [getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    return (all(isinstance(p, nn.Linear) for p in parts) and hasattr(mlp, "act_fn")
            and parts[0].bias is None and parts[1].bias is None and parts[0].in_features == parts[1].in_features)


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
