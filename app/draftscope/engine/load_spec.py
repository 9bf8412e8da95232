"""What opening a model needs, decided once at the top and carried down the load path.

A :class:`LoadSpec` holds the model already resolved to a source (models/resolve.py) and how it is
to run: Engine.load -> open_backend -> the backend read it, and none of them resolves a name again.
The window, the terminal and the server build it from the settings (core/runtime.py); a command
or a test may give Engine.load a name and options, which become a LoadSpec there.
"""

from __future__ import annotations

from dataclasses import dataclass

from draftscope.models.resolve import ModelSource, resolve_model
from draftscope.rules import GPU_LAYERS_AUTO


@dataclass(frozen=True)
class LoadSpec:
    source: ModelSource  # the model, resolved
    backend: str = "auto"  # auto, torch or llama.cpp (rules.BACKENDS)
    device: str | None = None  # None: the best available
    dtype: str | None = None  # None: bf16 where the hardware has it natively, else fp32 (torch only)
    threads: int | None = None  # CPU threads the model computes on (None: this computer's cores)
    context: int | None = None  # tokens read at once (None: the backend's default)
    slots: int = 1  # answers held at once, stepping in shared forwards
    workers: tuple[str, ...] = ()  # llama.cpp RPC workers (host:port) that take a share of the layers
    gpu_layers: int = GPU_LAYERS_AUTO  # llama.cpp's layers on the card (rules.GPU_LAYERS_*): auto, as many as fit

    @classmethod
    def of(cls, model: str | ModelSource | LoadSpec, **options) -> LoadSpec:
        """``model`` (what the user typed, or a source) resolved, with ``options`` as the fields;
        a LoadSpec is returned as it is (and then takes no options)."""
        if isinstance(model, LoadSpec):
            if options:
                raise TypeError(f"a LoadSpec takes no further options ({', '.join(options)})")
            return model
        source = model if isinstance(model, ModelSource) else resolve_model(model)
        workers = tuple(options.pop("workers", None) or ())
        return cls(source, workers=workers, **options)
