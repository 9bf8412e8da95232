"""Drafts from a small causal LM with its own KV cache (a chain).

At T > 0 the draft model picks each token by the target's own rule on its own distribution: the
Gumbel-max sample with the noise keyed by (seed, position) that the target will use there
(coupling). Whenever the two distributions agree on the winner, the draft is what the target
picks; where they differ the draft is simply not accepted. Drafts are thus a function of the seed,
and the answer stays plain decoding's. The draft equals the target's pick with probability at least
(1 - TV) / (1 + TV), TV the total variation between the two distributions, and always when they are
equal (a model drafting for itself has every draft accepted); rejection sampling's maximal coupling
reaches 1 - TV (what the difference costs: docs/benchmarks.md, "What coupling costs the draft model").

``draft`` follows naive_speculate's API: feed ``query_token_ids`` (tokens the cache has not seen)
and draft up to ``num_draft_tokens``, stopping early at EOS; returns the tokens and the logits
they were chosen from. The drafter keeps its cache in step with the accepted text by cropping to
the common prefix and feeding the rest before each proposal, so a fully accepted chain (its
last draft token included) and a rejected one both resync with no extra work.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from draftscope.draft_tree import DraftSource, DraftTree, chain_tree
from draftscope.drafters.interface import Drafter
from draftscope.engine import arrays as A
from draftscope.engine.backends.base import Backend
from draftscope.engine.sampling import PositionNoise, SamplingParams, choose, probabilities, recent_tokens

if TYPE_CHECKING:
    import torch

    from draftscope.engine.arrays import Array


@dataclass
class DraftOut:
    token_ids: torch.Tensor  # [batch, n]
    token_logits: torch.Tensor  # [batch, n, vocab]


def draft(
    model,
    query_token_ids: torch.Tensor,
    kv_cache,
    num_draft_tokens: int,
    sample_strategy: SamplingParams,
    *,
    eos_token_id: int | None = None,
    noise: PositionNoise | None = None,
) -> DraftOut:
    """A torch causal LM's draft (naive_speculate's API). ``noise``: the answer's keyed noise at T > 0
    (drafts coupled to the target's choice)."""
    torch = A.torch_module()  # a torch model is given: torch is loaded
    with torch.inference_mode():
        past = kv_cache.get_seq_length()
        q_len = query_token_ids.shape[1]
        positions = torch.arange(past, past + q_len, device=query_token_ids.device)[None]
        # Only the last position's logits are used: the head over a long query is most of its cost.
        logits = model(
            input_ids=query_token_ids,
            position_ids=positions,
            past_key_values=kv_cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        ids, all_logits = [], []
        for k in range(num_draft_tokens):
            rows = probabilities(logits, sample_strategy)
            position = past + q_len + k  # the absolute position this draft token would take
            tok = torch.tensor(choose(rows, [position] * rows.shape[0], noise), device=logits.device)
            ids.append(tok)
            all_logits.append(logits)
            if eos_token_id is not None and bool((tok == eos_token_id).all()):
                break
            if k + 1 < num_draft_tokens:
                pos = torch.full((tok.shape[0], 1), past + q_len + k, device=tok.device)
                out = model(input_ids=tok[:, None], position_ids=pos, past_key_values=kv_cache, use_cache=True)
                logits = out.logits[:, -1]
        return DraftOut(torch.stack(ids, dim=1), torch.stack(all_logits, dim=1))


_locks_guard = threading.Lock()


def _draft_lock(backend) -> threading.Lock:
    with _locks_guard:
        lock = getattr(backend, "draft_lock", None)
        if lock is None:
            lock = backend.draft_lock = threading.Lock()
        return lock


class ModelDrafter(Drafter):
    """``model``: a torch causal LM or an opened Backend (a GGUF draft model on llama.cpp runs in
    its own llama.cpp context, with no torch); either way it drafts through the backend seam the
    target uses, and samples by the target's rule on the rows the backend gives (NumPy's or torch's)."""

    name = "model"
    source = DraftSource.MODEL

    def __init__(self, model: Any, *, max_tokens: int = 6, eos_token_id: int | None = None) -> None:
        if not isinstance(model, Backend):  # a torch module: torch is loaded already
            from draftscope.engine.backends.pytorch.torch_backend import TorchBackend  # noqa: PLC0415  # torch

            model = TorchBackend(model, None, name="draft model")
        self.backend = model
        self.max_tokens = max_tokens
        # a draft ends where the draft model ends its answers: its backend knows its own end tokens
        # (generation config and tokenizer on torch, end-of-generation tokens on llama.cpp)
        self.stop_ids = set(getattr(model, "eos_ids", ())) | ({eos_token_id} if eos_token_id is not None else set())
        self.cached: list[int] = []  # tokens whose keys/values the draft model holds
        self.sampling = SamplingParams()
        self.noise: PositionNoise | None = None

    def set_sampling(self, params: SamplingParams, noise: PositionNoise | None) -> None:
        """The answer's sampling and its keyed noise (None when greedy), set by the engine per answer."""
        self.sampling, self.noise = params, noise

    def reset(self, context_ids: Sequence[int]) -> None:
        self.cached = []

    def _penalised(self, tokens: Sequence[int], row: Array) -> Array | None:
        """What the repetition penalty covers before the next token (None: no penalty)."""
        params = self.sampling
        if not params.penalised:
            return None
        return recent_tokens([tokens], params.repetition_window, row.shape[-1], like=row)

    def observe(self, accepted_ids: Sequence[int]) -> None:
        pass  # resynchronised lazily in propose

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0 or self.max_tokens <= 0:
            return DraftTree.empty()
        # One draft model serves every answer in progress (answers at once): one drafts at a time,
        # and a drafter whose answer's text another one replaced in the cache reads it again.
        with _draft_lock(self.backend):
            if getattr(self.backend, "draft_owner", None) is not self:
                self.cached = []
                self.backend.draft_owner = self
            with A.inference():  # torch's inference mode where a torch draft model runs
                return self._propose(context_ids, budget)

    def _catch_up(self, context: list[int]) -> Array:
        """The draft model's cache brought to ``context`` (what it holds of it kept): the row of logits
        after its last token."""
        backend = self.backend
        common = 0
        limit = min(len(self.cached), len(context) - 1)  # feed at least the last token
        while common < limit and self.cached[common] == context[common]:
            common += 1
        if common == 0:  # a new conversation: prefill, then the last token
            backend.start(context)
            row = backend.verify(context[-1], DraftTree.empty()).logits[-1:]
        else:  # cut what was not accepted, feed what was added since
            backend.truncate(common)
            rest = context[common + 1 :]
            row = backend.verify(context[common], chain_tree(rest)).logits[-1:]
        backend.commit(list(range(len(context) - common - 1)) if common else [])
        return row

    def _propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        n = min(budget, self.max_tokens)
        context = list(context_ids)
        row = self._catch_up(context)
        drafted: list[int] = []
        rows, recent = [], []
        for k in range(n):
            # the target's penalty at this position: over the same window of context and drafts
            recent.append(self._penalised(context + drafted, row))
            probs = probabilities(row, self.sampling, recent[-1])
            # the absolute position this draft token would take: the target's noise there (coupling)
            tok = choose(probs, [len(context) + k], self.noise)[0]
            drafted.append(tok)
            rows.append(row)
            if tok in self.stop_ids or k + 1 == n:
                break
            row = self.backend.verify(tok, DraftTree.empty()).logits[-1:]
            self.backend.commit([])
        # The draft model now holds the context and all drafted tokens but the last.
        self.cached = context + drafted[:-1]
        support = np.cumprod(self._chosen_probabilities(rows, recent, drafted))
        k = len(drafted)
        return DraftTree(
            tokens=np.array(drafted, dtype=np.int64),
            parents=np.arange(-1, k - 1, dtype=np.int32),
            depth=np.arange(1, k + 1, dtype=np.int32),
            support=support.astype(np.float32),
            source=np.full(k, DraftSource.MODEL, dtype=np.int8),
        )

    def _chosen_probabilities(self, rows: list, recent: list, drafted: list[int]) -> np.ndarray:
        """Each drafted token's probability under the draft model (raw softmax when greedy, where the
        processed distribution is one-hot): its path's product is the draft's support. Only those
        entries go to the host, not the rows."""
        logits = A.cat(rows)
        greedy = self.sampling.greedy
        seen = A.cat(recent) if self.sampling.penalised else None
        conf = A.softmax(A.floats(logits)) if greedy else probabilities(logits, self.sampling, seen)
        picked = A.gather(conf, A.like(np.array(drafted, dtype=np.int64)[:, None], conf))
        return A.to_numpy(picked)[:, 0].astype(np.float64)
