"""The transformers/torch backend: Hugging Face folders, hub ids and CUDA. A tree is one forward
with a 4D ancestor-only mask over a DynamicCache; commit gathers the accepted entries in place."""

from __future__ import annotations

import torch

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.pytorch.attention import kernel_names, step_kernels
from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.pytorch.tree_attention import crop_cache, keep_accepted, tree_inputs


def model_eos_ids(model, tokenizer) -> set[int]:
    eos = set()
    for source in (getattr(tokenizer, "eos_token_id", None), getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            eos.add(source)
        elif isinstance(source, (list, tuple)):
            eos.update(int(x) for x in source)
    return eos


class TorchBackend(Backend):
    kind = "torch"
    gives_hidden = True

    def __init__(self, model, tokenizer, *, name: str = "model", device=None, precision_reason: str = "") -> None:
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
        self.eos_ids = model_eos_ids(model, tokenizer)
        # the attention kernels are chosen per step for this kind of device (engine/backends/pytorch/attention.py)
        self.kernel_device = torch.device(self.device).type
        self._cache = None
        self._past = 0

    def describe(self) -> str:
        return f"torch · {self.device} · {self.precision}"

    @property
    def attention(self) -> str:
        """The attention kernels its steps run on, in words."""
        return kernel_names(self.kernel_device)

    @property
    def cached(self) -> int:
        return self._past

    @torch.inference_mode()
    def start(self, prompt: list[int], *, want_hidden: bool = False) -> torch.Tensor | None:
        from transformers import DynamicCache

        self._cache = DynamicCache()
        self._past = len(prompt) - 1
        if len(prompt) < 2:
            return None
        pre = torch.tensor([prompt[:-1]], device=self.device)
        with step_kernels(self.kernel_device, tree=False):
            out = self.model(input_ids=pre, past_key_values=self._cache, use_cache=True, logits_to_keep=1,  # logits unused
                             output_hidden_states=want_hidden)
        return out.hidden_states[-1][0, -1] if want_hidden else None

    @torch.inference_mode()
    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        input_ids, positions, mask = tree_inputs(root, tree, self._past, self.device, self.dtype)
        with step_kernels(self.kernel_device, tree=mask is not None):
            out = self.model(input_ids=input_ids, position_ids=positions, attention_mask=mask,
                             past_key_values=self._cache, use_cache=True, output_hidden_states=want_hidden)
        return Verified(out.logits[0, :, : self.vocab], out.hidden_states[-1][0] if want_hidden else None)

    def commit(self, path: list[int]) -> None:
        keep_accepted(self._cache, self._past, path)
        self._past += 1 + len(path)

    def truncate(self, length: int) -> None:
        crop_cache(self._cache, length)
        self._past = min(self._past, length)

    def close(self) -> None:
        self._cache = None
