"""scripts/setup.sh installs torch only where it is wanted (issue 67): on a machine with an NVIDIA card
(PyPI's CUDA build), with --with-torch in any mode (the CPU build from PyTorch's own index where there is no
card), and always for `setup.sh test`. The script's own choice is run here, with ``--torch-plan`` (which
prints it and installs nothing), on a PATH that holds a stand-in ``nvidia-smi`` or none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from draftscope.optional_torch import CPU_INDEX

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup.sh"


def torch_line(tmp_path: Path, *args: str, card: bool) -> str:
    """The line setup.sh prints about torch, on a machine with or without an NVIDIA card."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))  # all the script runs before it decides
    if card:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200'\n")
        smi.chmod(0o755)
    env = {"PATH": str(bin_dir), "PYTHON": sys.executable, "HOME": os.environ.get("HOME", str(tmp_path))}
    done = subprocess.run(
        [shutil.which("bash"), str(SETUP), *args, "--torch-plan"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "torch:" in line]
    assert len(lines) == 1, done.stdout
    return lines[0]


def test_a_cpu_machine_gets_no_torch_and_is_told_how_to_add_it(tmp_path):
    for args in ((), ("run",)):
        line = torch_line(tmp_path / "-".join(args or ("install",)), *args, card=False)
        assert "not needed" in line and "no NVIDIA card" in line
        assert "setup.sh --with-torch" in line  # how to add it later


@pytest.mark.parametrize("args", [("--with-torch",), ("run", "--with-torch"), ("--with-torch", "run")])
def test_with_torch_on_a_cpu_machine_is_the_cpu_build(tmp_path, args):
    line = torch_line(tmp_path, *args, card=False)
    assert "CPU build" in line and CPU_INDEX.split("/")[2] in line
    assert "--with-torch" in line and "no NVIDIA card" in line


@pytest.mark.parametrize("args", [(), ("run",), ("run", "--with-torch")])
def test_a_machine_with_a_card_gets_the_cuda_build(tmp_path, args):
    line = torch_line(tmp_path, *args, card=True)
    assert "CUDA build" in line and "nvidia-smi finds an NVIDIA card" in line
    assert "CPU build" not in line


@pytest.mark.parametrize("card", [False, True])
def test_the_test_mode_always_installs_torch(tmp_path, card):
    line = torch_line(tmp_path, "test", card=card)
    assert "setup.sh test" in line and "not needed" not in line
    assert ("CUDA build" if card else "CPU build") in line


def test_an_unknown_mode_is_refused_before_anything_is_installed(tmp_path):
    done = subprocess.run(["bash", str(SETUP), "tset"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage: scripts/setup.sh" in done.stderr
    assert "[setup]" not in done.stdout  # nothing was started
