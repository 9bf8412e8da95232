"""The settings dialog's GPU-layers row (Model tab): how many of a GGUF model's layers llama.cpp puts on
a graphics card (rules.GPU_LAYERS_*), as LM Studio's GPU offload and llama-server's -ngl.

It is offered only where it does something: a card llama.cpp's backends found (``gpu_offload.cards()``,
read once when the dialog is built), a backend and a device that put layers there, and no RPC workers
(they hold the layers themselves). Elsewhere the row is disabled and says why, in words; the stored
value is kept as it is, for the day it applies again."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QVBoxLayout, QWidget

from draftscope.engine.backends.llama.gpu_offload import Card
from draftscope.gui.form_widgets import hint, int_spin, row
from draftscope.rules import GPU_LAYERS_ALL, GPU_LAYERS_RANGE
from draftscope.storage.settings import Settings

AUTO_TEXT = "auto (as many as fit)"
CARD_DEVICES = ("auto", "cuda")  # the devices llama.cpp puts layers on a card for (backends._card_for)
NO_CARD = (
    "llama.cpp found no graphics card on this computer: GGUF models run on the CPU. For an NVIDIA card, "
    "bash scripts/build_llama_cuda.sh DEST builds llama.cpp with CUDA (then set LLAMA_CPP_LIB_PATH to DEST/bin)."
)
ON_TORCH = (
    "The torch backend is chosen: GPU layers apply to GGUF models on llama.cpp (torch puts the whole "
    "model on the device). Choose Auto or llama.cpp as the backend to set them."
)
WITH_WORKERS = "RPC workers hold the model's layers: none go on this computer's card. Clear Workers to set them."
AFTER = "Applies to GGUF models on llama.cpp; a change loads the model again."


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def unused_because(found: Sequence[Card], backend: str, device: str, workers: str) -> str | None:
    """Why the GPU-layers setting would do nothing with these choices (None: it is used)."""
    if not found:
        return NO_CARD
    if backend == "torch":
        return ON_TORCH
    if device not in CARD_DEVICES:
        return (
            f"The device is {device}: the model runs there, not on the {found[0].description}. "
            "Choose auto or cuda as the device to put layers on the card."
        )
    if workers.strip():
        return WITH_WORKERS
    return None


def what_it_does(card: Card) -> str:
    """The row's hint where it applies: the card, its free memory, and what auto, 0 and 999 mean."""
    return (
        f"Of a GGUF model's layers, those llama.cpp puts on the {card.description} ({_gb(card.free)} free "
        f"of {_gb(card.total)}). Auto: as many as fit; 0 keeps the model on the CPU; {GPU_LAYERS_ALL} (any "
        "count above the model's layers) puts all of them there."
    )


def tip(card: Card) -> str:
    """The spin box's tooltip where it applies: the hint, the card's name and when it applies."""
    return f"{what_it_does(card)} The card: {card.name}. {AFTER}"


class GpuLayers(QWidget):
    """The spin box (-1 auto, 0 none, a count; ``gpuLayersSpin``) with its hint under it, enabled by
    ``offer`` only where the setting is used. ``found``: the cards llama.cpp found."""

    def __init__(self, found: Sequence[Card]) -> None:
        super().__init__()
        self.cards = list(found)
        self.spin = int_spin("gpuLayersSpin", GPU_LAYERS_RANGE.low, GPU_LAYERS_RANGE.high)
        self.spin.setSpecialValueText(AUTO_TEXT)
        self.spin.setSuffix(" layers")
        self.why = hint("", wrap=True, objectName="gpuLayersHint")
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(row(self.spin, stretch_first=False))
        column.addWidget(self.why)
        self.fields = {"gpu_layers": self.spin}
        self.offer("auto", "auto", "")

    def show_settings(self, s: Settings) -> None:
        self.spin.setValue(s.gpu_layers)

    def values(self) -> dict:
        return {"gpu_layers": self.spin.value()}

    def offer(self, backend: str, device: str, workers: str) -> None:
        """Enable the spin box where the chosen backend, device and workers use it; say why not elsewhere."""
        reason = unused_because(self.cards, backend, device, workers)
        self.spin.setEnabled(reason is None)
        self.why.setText(reason or what_it_does(self.cards[0]))
        self.spin.setToolTip(reason or tip(self.cards[0]))
        self.setToolTip(self.spin.toolTip())
