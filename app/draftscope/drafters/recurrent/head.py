"""The recurrent draft head (ReDrafter's design, written for this app).

From the target's last-layer hidden state ``h`` at the last accepted position and the embedding
``e`` of the token the target just wrote, a small RNN walks forward:

    s_1 = silu(W e_1 + b),   s_t = silu(U s_{t-1} + W e_t + b)
    x   = h + silu(In [s_t, h]);  x = x + silu(B_i x)  (i = 1..layers)
    logits over the draft vocabulary = Out x

The embeddings are the target's own (not stored in the head). The draft vocabulary is the
``draft_vocab`` most frequent tokens of the training data (EAGLE-3's reduced vocabulary): the
output layer is a few thousand rows instead of the target's whole vocabulary, which is what keeps
a draft step cheap next to a target forward on a CPU. Scattered back into the full vocabulary
(zeros elsewhere) its softmax is still a proper distribution, so sampling stays exact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from draftscope.drafters.recurrent.target import as_target


@dataclass(frozen=True)
class HeadConfig:
    hidden: int  # the target's hidden size (h)
    embed: int  # the target's embedding width (e)
    state: int  # the RNN state size
    layers: int  # residual MLP blocks after the input layer
    draft_vocab: int  # rows of the output layer
    target_vocab: int  # the target's vocabulary (draft token ids index it)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> HeadConfig:
        return cls(**{k: int(data[k]) for k in ("hidden", "embed", "state", "layers", "draft_vocab", "target_vocab")})


class RecurrentHead(nn.Module):
    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.rnn_u = nn.Linear(cfg.state, cfg.state, bias=False)
        self.rnn_w = nn.Linear(cfg.embed, cfg.state)
        self.inp = nn.Linear(cfg.state + cfg.hidden, cfg.hidden)
        self.blocks = nn.ModuleList(nn.Linear(cfg.hidden, cfg.hidden) for _ in range(cfg.layers))
        self.out = nn.Linear(cfg.hidden, cfg.draft_vocab, bias=False)
        # Draft vocabulary row r is target token vocab_ids[r].
        self.register_buffer("vocab_ids", torch.arange(cfg.draft_vocab, dtype=torch.long))
        with torch.no_grad():  # start the recurrence near zero so h carries the first steps
            self.rnn_u.weight.mul_(0.1)
            for block in self.blocks:
                block.weight.mul_(0.1)

    @classmethod
    def for_target(cls, model, vocab_ids: torch.Tensor, *, state: int | None = None, layers: int = 2) -> RecurrentHead:
        """A fresh head for ``model`` whose output rows start as the target's own output rows for
        the draft vocabulary (a good start: the head begins by reading h as the target does).
        ``model``: a transformers model or a target view (recurrent.target)."""
        target = as_target(model)
        cfg = HeadConfig(
            hidden=target.hidden,
            embed=target.embed_width,
            state=state or target.hidden,
            layers=layers,
            draft_vocab=int(vocab_ids.numel()),
            target_vocab=target.vocab,
        )
        head = cls(cfg)
        with torch.no_grad():
            head.vocab_ids.copy_(vocab_ids.long())
            head.out.weight.copy_(target.output_rows(vocab_ids.long()).cpu())
        return head

    def first_state(self, emb: torch.Tensor) -> torch.Tensor:
        return F.silu(self.rnn_w(emb))

    def next_state(self, state: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        return F.silu(self.rnn_u(state) + self.rnn_w(emb))

    def logits(self, state: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """[..., draft_vocab] logits over the draft vocabulary."""
        x = hidden + F.silu(self.inp(torch.cat([state, hidden], dim=-1)))
        for block in self.blocks:
            x = x + F.silu(block(x))
        return self.out(x)

    def full_distribution(self, draft_probs: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary probabilities [..., R] as a distribution over the target's vocabulary."""
        full = draft_probs.new_zeros(*draft_probs.shape[:-1], self.cfg.target_vocab)
        return (
            full.index_copy_(-1, self.vocab_ids, draft_probs)
            if draft_probs.dim() == 1
            else full.scatter_(-1, self.vocab_ids.expand_as(draft_probs), draft_probs)
        )

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())
