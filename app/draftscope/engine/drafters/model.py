"""Drafts from a small causal LM with its own KV cache (a chain; greedy or sampled).

``draft`` follows naive_speculate's API: feed ``query_token_ids`` (tokens the cache has not seen)
and draft up to ``num_draft_tokens``, stopping early at EOS; returns the tokens and the logits
they were drawn from. The drafter keeps its cache in step with the accepted text by cropping to
the common prefix and feeding the rest before each proposal, so a fully accepted chain (its
last draft token included) and a rejected one both resync with no extra work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.engine.sampling import SamplingParams, probabilities
from draftscope.engine.tree_attention import crop_cache


@dataclass
class DraftOut:
    token_ids: torch.Tensor  # [batch, n]
    token_logits: torch.Tensor  # [batch, n, vocab]


@torch.inference_mode()
def draft(model, query_token_ids: torch.Tensor, kv_cache, num_draft_tokens: int, sample_strategy: SamplingParams,
          *, eos_token_id: int | None = None, generator: torch.Generator | None = None) -> DraftOut:
    past = kv_cache.get_seq_length()
    q_len = query_token_ids.shape[1]
    positions = torch.arange(past, past + q_len, device=query_token_ids.device)[None]
    # Only the last position's logits are used: the head over a long query is most of its cost.
    logits = model(input_ids=query_token_ids, position_ids=positions, past_key_values=kv_cache, use_cache=True,
                   logits_to_keep=1).logits[:, -1]
    ids, all_logits = [], []
    for k in range(num_draft_tokens):
        probs = probabilities(logits, sample_strategy)
        if sample_strategy.greedy:
            tok = logits.argmax(-1)
        else:
            tok = torch.multinomial(probs.cpu(), 1, generator=generator)[:, 0].to(logits.device)
        ids.append(tok)
        all_logits.append(logits)
        if eos_token_id is not None and bool((tok == eos_token_id).all()):
            break
        if k + 1 < num_draft_tokens:
            pos = torch.full((tok.shape[0], 1), past + q_len + k, device=tok.device)
            logits = model(input_ids=tok[:, None], position_ids=pos, past_key_values=kv_cache, use_cache=True).logits[:, -1]
    return DraftOut(torch.stack(ids, dim=1), torch.stack(all_logits, dim=1))


class ModelDrafter:
    name = "model"
    source = DraftSource.MODEL

    def __init__(self, model, *, max_tokens: int = 6, eos_token_id: int | None = None,
                 temperature: float | None = None) -> None:
        from transformers import DynamicCache

        self.model = model
        self.max_tokens = max_tokens
        # Sample drafts at this temperature instead of the answer's (verification stays exact:
        # it uses the distribution the drafts were really drawn from).
        self.temperature = temperature
        self.eos_token_id = eos_token_id
        self._cache_cls = DynamicCache
        self.cache = DynamicCache()
        self.cached: list[int] = []  # tokens whose keys/values are in self.cache
        self.sampling = SamplingParams()
        self.generator = torch.Generator().manual_seed(0)
        self.device = next(model.parameters()).device

    def set_sampling(self, params: SamplingParams, seed: int) -> None:
        if self.temperature is not None and not params.greedy:
            params = replace(params, temperature=self.temperature)
        self.sampling = params
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def samples_drafts(self) -> bool:
        """True when drafts are drawn at random (then verified by the model rule)."""
        return not self.sampling.greedy

    def reset(self, context_ids: Sequence[int]) -> None:
        self.cache = self._cache_cls()
        self.cached = []

    def observe(self, accepted_ids: Sequence[int]) -> None:
        pass  # resynchronised lazily in propose

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        n = min(budget, self.max_tokens)
        if n <= 0:
            return DraftTree.empty()
        context = list(context_ids)
        common = 0
        limit = min(len(self.cached), len(context) - 1)  # feed at least the last token
        while common < limit and self.cached[common] == context[common]:
            common += 1
        crop_cache(self.cache, common)
        query = torch.tensor([context[common:]], dtype=torch.long, device=self.device)
        out = draft(self.model, query, self.cache, n, self.sampling, eos_token_id=self.eos_token_id, generator=self.generator)
        drafted = out.token_ids[0].tolist()
        # The cache now holds the context and all drafted tokens but the last.
        self.cached = context + drafted[:-1]
        q = probabilities(out.token_logits[0], self.sampling).float().cpu()
        # Support = path probability under the draft model (raw softmax when greedy, where q is one-hot).
        conf = q if not self.sampling.greedy else out.token_logits[0].float().softmax(-1).cpu()
        path_prob, support = 1.0, []
        for i, tok in enumerate(drafted):
            path_prob *= float(conf[i, tok])
            support.append(path_prob)
        k = len(drafted)
        return DraftTree(
            tokens=np.array(drafted, dtype=np.int64),
            parents=np.arange(-1, k - 1, dtype=np.int32),
            depth=np.arange(1, k + 1, dtype=np.int32),
            support=np.array(support, dtype=np.float32),
            source=np.full(k, DraftSource.MODEL, dtype=np.int8),
            # slots: how many draws were asked for before drawing (EOS may end the chain sooner).
            extra={"q_probs": {i: q[i] for i in range(k)}, "slots": n} if not self.sampling.greedy else {},
        )
