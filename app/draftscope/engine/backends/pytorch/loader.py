"""Loading a causal LM for the engine: device and dtype per machine, and a safetensors copy of
GGUF models in the user cache (dequantising a GGUF takes seconds; the copy loads fast). torch is
imported by :func:`load_model`, not with the module: where it is not installed, a load says so in
words (optional_torch), and what merely names these types imports nothing heavy."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from draftscope import paths
from draftscope.engine.backends.llama.gguf_check import read_header
from draftscope.engine.backends.pytorch import precision
from draftscope.models.resolve import ModelNotFoundError, ModelSource, file_digest, load_tokenizer
from draftscope.optional_torch import require_torch

if TYPE_CHECKING:
    import torch


@dataclass
class LoadedModel:
    model: Any  # a transformers model; the llama.cpp backend of a GGUF draft model beside a llama.cpp target
    tokenizer: object
    source: ModelSource
    device: torch.device
    dtype: torch.dtype | None  # None: the llama.cpp draft model's (its file's own formats)
    dtype_reason: str = ""

    @property
    def name(self) -> str:
        return self.source.display_name

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)


def load_model(source: ModelSource, *, device: str | None = None, dtype: str | None = None) -> LoadedModel:
    """``source`` (resolved once, where the user's choice is read: models/resolve.py) as a torch model.
    Raises optional_torch.TorchMissing where torch is not installed."""
    if not isinstance(source, ModelSource):  # a name is resolved once, where it is read (resolve_model)
        raise TypeError(f"load_model takes a resolved ModelSource, not {type(source).__name__}")
    require_torch(f"{source.display_name} on the torch backend")
    from transformers import AutoModelForCausalLM  # noqa: PLC0415  # heavy: loaded with the first model

    from draftscope.engine.backends.pytorch.cpu_linear import use_fast_layout  # noqa: PLC0415  # torch

    dev = precision.pick_device(device)
    chosen = precision.choose(dev, dtype)
    dt = chosen.dtype
    tokenizer = load_tokenizer(source)
    try:
        if source.kind == "gguf":
            model = _load_gguf(source, dt)
        else:
            model = AutoModelForCausalLM.from_pretrained(source.location, dtype=dt)
    except OSError as exc:
        raise ModelNotFoundError(f"could not load model {source.location!r}: {exc}") from exc
    model.to(dev).eval()
    layout = use_fast_layout(model)
    return LoadedModel(model, tokenizer, source, dev, dt, chosen.reason + (f"; {layout}" if layout else ""))


def _load_gguf(source: ModelSource, dtype: torch.dtype):
    import torch  # noqa: PLC0415  # imported by load_model first (require_torch)
    from transformers import AutoModelForCausalLM  # noqa: PLC0415  # heavy: loaded with the first model

    gguf = source.gguf_path
    if not gguf.is_file():
        raise ModelNotFoundError(f"model file not found: {gguf}")
    read_header(gguf)  # a damaged or cut-short file named as such, not in numpy's words
    # kept in the dtype it runs in: a 1.5B model read as fp32 and then cast would need twice the memory
    cached = paths.models_dir() / f"{file_digest(gguf)[:24]}-{str(dtype).removeprefix('torch.')}"
    if (cached / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(str(cached), dtype=dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:
        raise ModelNotFoundError(f"{gguf} could not be loaded as a GGUF model: {exc}") from exc
    # The weights are plain tensors once dequantised; drop the GGUF "quantizer" marking so the
    # model saves as ordinary safetensors.
    model.hf_quantizer = None  # type: ignore[assignment]  # set by from_pretrained; nn.Module's __setattr__ is typed for tensors and modules
    for attr in ("quantization_config",):
        if hasattr(model.config, attr):
            delattr(model.config, attr)
    model = model.to(dtype)  # type: ignore[arg-type]  # transformers wraps .to: its stub takes self as the first argument
    partial = cached.with_name(cached.name + ".part")
    model.save_pretrained(str(partial), safe_serialization=True)
    partial.replace(cached)
    return model


def truncated_model(model, layers: int):
    """An early-exit draft model: the target's first ``layers`` decoder layers with its own final
    norm and head, sharing the target's weights (no extra memory) and tokenizer. Its
    distribution differs from the target's, which is what a draft model's should do."""
    import torch  # noqa: PLC0415  # a torch model is given: torch is there

    inner = getattr(model, model.base_model_prefix, None)
    blocks = getattr(inner, "layers", None)
    if inner is None or blocks is None:
        raise ValueError(f"{type(model).__name__} has no decoder layer list to truncate")
    if not 0 < layers < len(blocks):
        raise ValueError(f"a truncated draft needs 1..{len(blocks) - 1} layers, got {layers}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:layers]
    short = copy.copy(inner)
    short._modules = dict(inner._modules)  # copy.copy shares the module dicts: give it its own
    short._modules["layers"] = torch.nn.ModuleList(list(blocks)[:layers])
    short.config = config
    draft = copy.copy(model)
    draft._modules = dict(model._modules)
    draft._modules[model.base_model_prefix] = short
    draft.config = config
    return draft
