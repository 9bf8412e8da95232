"""The transformers/torch backend: Hugging Face folders, hub ids and CUDA. A tree is one forward
with a 4D ancestor-only mask over a DynamicCache; commit gathers the accepted entries in place."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.base import OneSlotBackend, Verified
from draftscope.engine.backends.held import HeldTokens, KeepsPrefixes
from draftscope.engine.backends.pytorch import torch_state
from draftscope.engine.backends.pytorch.attention import kernel_names, step_kernels
from draftscope.engine.backends.pytorch.tree_attention import crop_cache, keep_accepted, tree_inputs
from draftscope.models.fim_tokens import past_the_middle

if TYPE_CHECKING:
    from transformers.cache_utils import Cache


def model_eos_ids(model, tokenizer) -> set[int]:
    eos = set()
    for source in (getattr(tokenizer, "eos_token_id", None), getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            eos.add(source)
        elif isinstance(source, (list, tuple)):
            eos.update(int(x) for x in source)
    return eos | past_the_middle(tokenizer)  # a code model's FIM ends, as llama.cpp's end-of-generation set has them


class TorchBackend(KeepsPrefixes, OneSlotBackend):
    kind = "torch"
    gives_hidden = True
    device: torch.device
    dtype: torch.dtype
    model: torch.nn.Module

    def __init__(
        self,
        model,
        tokenizer,
        *,
        name: str = "model",
        device: torch.device | None = None,
        precision_reason: str = "",
        context: int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = device or next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.precision = str(self.dtype).removeprefix("torch.")
        self.precision_reason = precision_reason
        self.vocab = int(model.config.vocab_size)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
        # Tree verification passes one full-attention mask to every layer; sliding-window layers
        # (Gemma 3) keep only their window, so stay inside it rather than misread the cache.
        window = getattr(model.config, "sliding_window", None)
        if window and "sliding_attention" in (getattr(model.config, "layer_types", None) or []):
            self.max_context = min(self.max_context, int(window))
        if context:  # the user's context length (Settings ▸ Model): less cache, within the model's own
            self.max_context = min(self.max_context, int(context))
        self.eos_ids = model_eos_ids(model, tokenizer)
        # the attention kernels are chosen per step for this kind of device (engine/backends/pytorch/attention.py)
        self.kernel_device = torch.device(self.device).type
        self._cache: Cache | None = None  # made by the first truncate (a DynamicCache here)
        self._past = 0
        self.held = HeldTokens(1)  # the tokens at the cached positions: a new prompt keeps what it shares

    def describe(self) -> str:
        return f"torch · {self.device} · {self.precision}"

    @property
    def attention(self) -> str:
        """The attention kernels its steps run on, in words."""
        return kernel_names(self.kernel_device)

    @property
    def cached(self) -> int:
        return self._past

    def cpu_threads(self) -> int | None:
        """torch's intra-op threads, where the model computes on the CPU (on a card they only launch kernels)."""
        return torch.get_num_threads() if self.kernel_device == "cpu" else None

    def set_threads(self, threads: int) -> None:
        # on the model's thread: torch's OpenMP team takes the count of the thread that computes
        torch.set_num_threads(threads)

    @torch.inference_mode()
    def prefill(self, tokens: list[int], start: int, *, want_hidden: bool = False) -> torch.Tensor | None:
        self._follow(start)
        if not tokens:
            return None
        pre = torch.tensor([list(tokens)], device=self.device)
        with step_kernels(self.kernel_device, tree=False):
            # positions follow the cache's length (start): transformers counts them from it
            out = self.model(
                input_ids=pre,
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=1,  # logits unused
                output_hidden_states=want_hidden,
            )
        self._past = start + len(tokens)
        self.held.read(0, start, tokens)
        return out.hidden_states[-1][0, -1] if want_hidden else None

    def _follow(self, start: int) -> None:
        """The cache cut back to ``start`` positions, where a prompt's reading goes on."""
        if start > self._past:
            raise ValueError(f"the cache holds {self._past} positions; a prefill from {start} does not follow")
        if start < self._past or self._cache is None:
            self.truncate(start)

    @torch.inference_mode()
    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        self.held.verifying(0, root, tree.tokens)
        input_ids, positions, mask = tree_inputs(root, tree, self._past, self.device, self.dtype)
        with step_kernels(self.kernel_device, tree=mask is not None):
            out = self.model(
                input_ids=input_ids,
                position_ids=positions,
                attention_mask=mask,
                past_key_values=self._cache,
                use_cache=True,
                output_hidden_states=want_hidden,
            )
        return Verified(out.logits[0, :, : self.vocab], out.hidden_states[-1][0] if want_hidden else None)

    def commit(self, path: list[int]) -> None:
        keep_accepted(self._cache, self._past, path)
        self.held.committed(0, self._past, path)
        self._past += 1 + len(path)

    def truncate(self, length: int) -> None:
        if length == 0 or self._cache is None:  # nothing kept: a fresh cache, as a new answer's
            from transformers import DynamicCache  # noqa: PLC0415  # heavy: loaded with the model

            self._cache = DynamicCache()
        else:
            crop_cache(self._cache, length)
        self._past = min(self._past, length)
        self.held.cut(0, length)

    # a cache kept on disk (torch_state.py): a DynamicCache's tensors as bytes and back
    saves_slots = True

    def cache_identity(self) -> dict:
        return torch_state.torch_identity(self)

    def export_slot(self, slot: int) -> bytes | None:
        return torch_state.export_cache(self._cache, self._past)

    def import_slot(self, slot: int, tokens: list[int], positions: int, state: bytes) -> bool:
        self.truncate(0)
        cache = torch_state.import_cache(state, positions, self.dtype, self.device)
        if cache is None:
            return False
        self._cache, self._past = cache, positions
        self.held.read(0, 0, tokens)
        return True

    def close(self) -> None:
        self._cache = None
