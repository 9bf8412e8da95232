"""Which dtype to run in: bf16 where the hardware computes it natively (GPUs that support it, CPUs
with AVX512-BF16 or AMX), fp32 on other CPUs, where bf16 is emulated and many times slower (seen
on an AVX2-only EPYC: bf16 matmuls 35-65x slower than fp32). Every choice comes with the
reason in words, for the status bar and ``--verbose``. torch is imported where a choice is made,
not with the module: the window and the terminal ask what device a model would run on
(:func:`device_type`) where torch is not installed."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from draftscope.optional_torch import torch_available
from draftscope.rules import DTYPES

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype
    reason: str

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def cpu_bf16_features() -> tuple[bool | None, str]:
    """(native bf16?, which feature says so); None when the CPU cannot be asked."""
    if sys.platform.startswith("linux"):
        try:
            text = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return None, "/proc/cpuinfo unreadable"
        flags = set()
        for line in text.splitlines():
            if line.startswith(("flags", "Features")):
                flags.update(line.split(":", 1)[-1].split())
                break
        for flag, name in (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("bf16", "ARM BF16")):
            if flag in flags:
                return True, name
        return False, "no AVX512-BF16 or AMX"
    if sys.platform == "darwin" and platform.machine() == "arm64":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=2
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None, "sysctl unavailable"
        return (out == "1"), ("ARM BF16" if out == "1" else "no ARM BF16")
    return None, "CPU features unknown on this system"


def bf16_speed_ratio(size: int = 1024, rows: int = 16, repeats: int = 5) -> float:
    """fp32 time / bf16 time of one matmul shaped like a verify step (>1: bf16 is faster). Runs
    alternate so a busy machine slows both alike; the best of each is compared."""
    import torch  # noqa: PLC0415  # seconds to import: not with the module (device_type needs none)

    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    for _ in range(repeats):
        for dtype in best:
            a, b = torch.ones(rows, size, dtype=dtype), torch.ones(size, size, dtype=dtype)
            t0 = time.perf_counter()
            a @ b
            best[dtype] = min(best[dtype], time.perf_counter() - t0)
    return best[torch.float32] / best[torch.bfloat16]


def choose(device: torch.device, requested: str | None = None) -> Precision:
    """The dtype for ``device``; ``requested`` (a DTYPES name) other than auto wins."""
    import torch  # noqa: PLC0415  # seconds to import: not with the module (device_type needs none)

    if requested and requested != "auto":
        if requested not in DTYPES:
            raise ValueError(f"unknown dtype {requested!r} (choose from {', '.join(DTYPES)})")
        return Precision(getattr(torch, requested), "as asked (Settings ▸ Model, or --dtype)")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Precision(torch.bfloat16, "the GPU supports bf16")
        return Precision(torch.float16, "the GPU has no bf16")
    if device.type == "mps":
        return Precision(torch.float16, "Apple GPU")
    native, feature = cpu_bf16_features()
    if native is None:  # cannot ask the CPU: measure
        ratio = bf16_speed_ratio()
        if ratio > 1.1:
            return Precision(torch.bfloat16, f"bf16 measured {ratio:.1f}x faster than fp32 here")
        return Precision(torch.float32, f"bf16 measured {1 / ratio:.1f}x slower than fp32 here")
    if native:
        return Precision(torch.bfloat16, f"the CPU has {feature}")
    return Precision(torch.float32, f"the CPU has {feature}: bf16 would be emulated, and slow")


def pick_device(requested: str | None = None) -> torch.device:
    """The device a model runs on: the one asked for, else CUDA, else MPS, else the CPU."""
    import torch  # noqa: PLC0415  # seconds to import: not with the module (device_type needs none)

    if requested and requested != "auto":
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def device_type(requested: str | None = None) -> str:
    """The type of the device a model would run on ("cpu", "cuda", "mps"), as :func:`pick_device`
    says; without torch, the one asked for, else the CPU (llama.cpp finds its card itself)."""
    if torch_available():
        return pick_device(requested).type
    return requested.split(":")[0] if requested and requested != "auto" else "cpu"
