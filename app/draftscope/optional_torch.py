"""PyTorch is optional: a GGUF model on llama.cpp (the default on a CPU) needs none of it. What does need
it (the torch backend and Hugging Face models, the recurrent head's training, learning a model's style,
the GPU and lossless benchmarks) asks here first, and meets a :class:`TorchMissing` whose words say
what needs it and how to install it, never an ImportError. One place knows how torch is installed:
the CPU build from PyTorch's own index on a machine without an NVIDIA card (a few hundred MB), PyPI's
CUDA build where ``nvidia-smi`` finds a card (several GB)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass

EXTRA = "draftscope[torch]"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REQUIREMENT = "torch>=2.6"  # transformers 5 turns torch off below 2.6
MIN_VERSION = (2, 6)
RESTART = "was installed after Draftscope started"


class TorchMissing(RuntimeError):
    """What needs PyTorch, which is not usable here (missing, too old, or installed after the start), and
    what to do."""

    def __init__(self, what: str) -> None:
        self.what = what
        why = why_not_usable() or "is not installed here"
        todo = "Restart Draftscope to use it." if why == RESTART else how_to_install()
        super().__init__(f"{what} needs PyTorch, which {why}. {todo}")


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
    """Whether torch can be used here (without importing it: that costs seconds)."""
    return why_not_usable() is None


def why_not_usable() -> str | None:
    """Why torch cannot be used, in words (None when it can): not found; found without its metadata (an
    install cut short, which transformers' import then fails on); older than REQUIREMENT; or installed
    after transformers judged it missing (it decides once, at its import)."""
    if "torch" in sys.modules and sys.modules["torch"] is None:
        return "is not installed here"
    try:
        if importlib.util.find_spec("torch") is None:
            return "is not installed here"
        version = importlib.metadata.version("torch")
    except (ImportError, ValueError):  # PackageNotFoundError is an ImportError: files without their metadata
        return "is not installed whole here (an install cut short): install it again"
    if _major_minor(version) < MIN_VERSION:
        return f"is {version} here, older than {REQUIREMENT[len('torch>=') :]}"
    judged = sys.modules.get("transformers.utils.import_utils")
    return None if judged is None or judged.is_torch_available() else RESTART


def _major_minor(version: str) -> tuple[int, ...]:
    parts = version.split("+")[0].split(".")[:2]
    return tuple(int(p) if p.isdigit() else 0 for p in parts)


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
