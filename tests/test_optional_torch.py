"""What says whether PyTorch can be used (app/draftscope/optional_torch.py): an install cut short, one
too old for transformers, and one made after transformers judged it missing are each refused in words
that say what to do, never reached as an ImportError."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

from draftscope import optional_torch


def test_the_torch_here_is_usable():
    pytest.importorskip("torch")
    assert optional_torch.why_not_usable() is None and optional_torch.torch_available()


def test_an_install_cut_short_has_no_metadata_and_is_not_usable(monkeypatch):
    def no_metadata(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    assert not optional_torch.torch_available()
    assert "install it again" in str(optional_torch.TorchMissing("The torch backend"))


def test_a_torch_older_than_transformers_takes_is_named_with_its_version(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.4.1+cpu")
    message = str(optional_torch.TorchMissing("A Hugging Face model folder"))
    assert "is 2.4.1+cpu here, older than 2.6" in message and "pip install" in message


def test_torch_installed_after_transformers_judged_it_missing_asks_for_a_restart(monkeypatch):
    pytest.importorskip("torch")
    judged = types.SimpleNamespace(is_torch_available=lambda: False)
    monkeypatch.setitem(sys.modules, "transformers.utils.import_utils", judged)
    message = str(optional_torch.TorchMissing("Training the recurrent head"))
    assert not optional_torch.torch_available()
    assert message.endswith("Restart Draftscope to use it.") and "pip install" not in message


def test_a_hidden_torch_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert optional_torch.why_not_usable() == "is not installed here"
