"""Issue 67: where torch is not installed, the settings offer the CPU alone (llama.cpp finds its card
under auto), Auto's precision says in words that PyTorch is not installed and that a GGUF keeps its
own, and the catalogue's list sizes the torch backend without asking torch; with torch, as before."""

from __future__ import annotations

import sys

import pytest

from draftscope.core import settings_checks, words
from draftscope.engine.backends.pytorch import precision


@pytest.fixture
def no_torch(monkeypatch):
    """torch as if not installed: ``import torch`` fails, and optional_torch says it is missing."""
    monkeypatch.setitem(sys.modules, "torch", None)


def test_without_torch_only_the_cpu_is_offered_and_auto_says_why(no_torch):
    assert settings_checks.available_devices() == ["cpu"]
    assert words.run_precision("auto", "auto") is None
    text, why = settings_checks.auto_precision_text(words.run_precision("auto", "auto"))
    assert text == "Auto (the GGUF's own)"
    assert "PyTorch is not installed" in why and "llama.cpp" in why and "Install PyTorch" in why


def test_without_torch_the_device_is_the_one_asked_for_else_the_cpu(no_torch):
    assert [precision.device_type(d) for d in (None, "auto", "cpu", "cuda:1")] == ["cpu", "cpu", "cpu", "cuda"]


def test_with_torch_the_devices_and_auto_come_from_torch():
    import torch

    devices = settings_checks.available_devices()
    assert devices[0] == "cpu" and ("cuda" in devices) == torch.cuda.is_available()
    auto = words.run_precision("cpu", "auto")
    assert auto is not None and auto.name in ("float32", "bfloat16")
    assert settings_checks.auto_precision_text(auto)[0].startswith(f"Auto ({auto.name} here")
    assert settings_checks.auto_precision_text(None)[1] == "This device is not available here."
    assert precision.device_type("auto") == precision.pick_device("auto").type


def test_models_list_sizes_the_torch_backend_without_torch(no_torch, monkeypatch, capsys):
    from draftscope.cli import main
    from draftscope.engine import backends

    monkeypatch.setattr(backends, "backend_for_gguf", lambda *a, **k: "torch")  # as for a card only torch drives
    assert main(["models", "list"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("memory figures for float32 (PyTorch is not installed here)")
