"""Issue 67: looking for a model's recurrent head needs no torch (the runtime looks on every load); a
head that is there, or a training asked for, where torch is not installed is refused in the words of
optional_torch (HeadNeedsTorch: a HeadError, so the runtime makes it a notice, and a TorchMissing)."""

from __future__ import annotations

import sys

import pytest

from draftscope import paths
from draftscope.core.runtime import _open_recurrent
from draftscope.drafters.recurrent.files import HeadError, HeadNeedsTorch, default_head_path, json_path
from draftscope.drafters.recurrent.heads import find_head, find_recurrent, training_target
from draftscope.drafters.recurrent.train import train_head
from draftscope.drafters.recurrent.train_options import TrainOptions
from draftscope.optional_torch import TorchMissing

MODEL = "some-model.gguf"


@pytest.fixture
def no_torch(monkeypatch, tmp_path):
    """torch as if not installed (``import torch`` fails, optional_torch says so); heads kept in tmp_path."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(paths, "heads_dir", lambda: tmp_path)


def test_a_model_without_a_head_is_looked_at_without_torch(no_torch):
    assert find_head(MODEL) is None and find_recurrent(MODEL, engine=None) is None
    notices: list[str] = []
    assert _open_recurrent(MODEL, None, None, notices, strict=False) is None and notices == []


def test_a_head_there_without_torch_is_a_notice_in_words(no_torch):
    json_path(default_head_path(MODEL)).write_text("{}")
    with pytest.raises(HeadNeedsTorch) as refused:
        find_recurrent(MODEL, engine=None)
    assert isinstance(refused.value, HeadError) and isinstance(refused.value, TorchMissing)
    notices: list[str] = []
    assert _open_recurrent(MODEL, None, None, notices, strict=False) is None
    assert len(notices) == 1 and notices[0].startswith("Recurrent drafter not used: The recurrent drafter")
    assert "needs PyTorch, which is not installed" in notices[0] and "pip install" in notices[0]


def test_training_without_torch_is_refused_before_anything_is_read(no_torch, tmp_path):
    options = TrainOptions(data=[f"text:{tmp_path / 'not-there.txt'}"])  # reading it would fail otherwise
    for attempt in (lambda: train_head(None, None, options, tmp_path / "head"), lambda: training_target(None)):
        with pytest.raises(HeadNeedsTorch, match="Training a recurrent head .* needs PyTorch"):
            attempt()
