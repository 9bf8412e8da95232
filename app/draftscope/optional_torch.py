"""PyTorch is optional: a GGUF model on llama.cpp (the default on a CPU) needs none of it. What does need
it (the torch backend and Hugging Face models, the recurrent head's training, learning a model's style,
the GPU and lossless benchmarks) asks here first, and meets a :class:`TorchMissing` whose words say
what needs it and how to install it, never an ImportError. One place knows how torch is installed:
the CPU build from PyTorch's own index on a machine without an NVIDIA card (a few hundred MB), PyPI's
CUDA build where ``nvidia-smi`` finds a card (several GB)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass

EXTRA = "draftscope[torch]"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REQUIREMENT = "torch>=2.6"  # transformers 5 turns torch off below 2.6


class TorchMissing(RuntimeError):
    """What needs PyTorch, which is not installed, and how to install it."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what} needs PyTorch, which is not installed here. {how_to_install()}")


def how_to_install() -> str:
    """Where torch can be added: pip and set-up from a source install; a bundle holds none and takes none."""
    if getattr(sys, "frozen", False):  # the PyInstaller bundle: its packages are fixed at build time
        return (
            "This bundle is built without it, for GGUF models on llama.cpp; for the torch backend install "
            f"Draftscope with pip instead: `pip install '{EXTRA}'`."
        )
    plan = install_plan()
    return (
        f"Install it ({plan.size_words}) with `{plan.command_words}`, or `bash scripts/setup.sh --with-torch`; "
        "in the window, Settings ▸ Model ▸ Install PyTorch. GGUF models on llama.cpp need no torch."
    )


def quiet_transformers() -> None:
    """transformers warns "PyTorch was not found" on every start without torch; TorchMissing says, where it
    matters, what needs it. Set before transformers is first imported (its warning is read at import)."""
    if not torch_available():
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def torch_available() -> bool:
    """Whether ``import torch`` would find it (without importing it: that costs seconds)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def require_torch(what: str) -> None:
    """Raise :class:`TorchMissing` naming ``what`` when torch is not installed."""
    if not torch_available():
        raise TorchMissing(what)


def has_nvidia_card() -> bool:
    """Whether this machine has an NVIDIA card (its driver's ``nvidia-smi`` is on the PATH)."""
    return shutil.which("nvidia-smi") is not None


@dataclass(frozen=True)
class InstallPlan:
    pip_args: tuple[str, ...]  # after `python -m pip install`
    size_words: str  # what the user downloads, in words
    download_bytes: int  # the estimate the window shows against pip's progress

    @property
    def command_words(self) -> str:
        return "pip install " + " ".join(f"'{a}'" if ">" in a else a for a in self.pip_args)


def install_plan(card: bool | None = None) -> InstallPlan:
    """How torch is installed on this machine: the CPU build without a card, the CUDA build with one."""
    if has_nvidia_card() if card is None else card:
        return InstallPlan((REQUIREMENT,), "about 3 GB to download with CUDA, 6-7 GB on disk", 3_000_000_000)
    # the CPU index's wheels carry "+cpu", which pip ranks above PyPI's CUDA build of the same version
    return InstallPlan(
        (REQUIREMENT, "--extra-index-url", CPU_INDEX), "about 200 MB to download, 700 MB on disk", 200_000_000
    )
