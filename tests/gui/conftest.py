"""Fixtures the window tests share: the tiny real models behind the chat window, and a test's own
data and cache folders."""

import pytest
from engine_fixtures import tiny_llama

from draftscope.engine.engine import Engine
from draftscope.sysinfo import freeze_loaded_objects


@pytest.fixture
def own_data_and_cache(tmp_path, monkeypatch):
    """The test's own data and cache folders: heads, learned answers and the default datastore go
    there, and no catalogue model is found downloaded."""
    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DRAFTSCOPE_CACHE_DIR", str(tmp_path / "cache"))


def window_engine(tokenizer, seed: int) -> Engine:
    """A tiny real Llama (2 layers) with room for 4,096 positions, as the chat window runs it."""
    model = tiny_llama(len(tokenizer), seed=seed, layers=2, hidden=64)
    model.config.max_position_embeddings = 4096
    return Engine(model, tokenizer, name="tiny")


@pytest.fixture(scope="module")
def chat_engine(tokenizer):
    """The chat and attachment tests' model (seed 5)."""
    engine = window_engine(tokenizer, seed=5)
    freeze_loaded_objects()  # as the app's model loader does, so a full GC of torch's objects is not timed
    return engine


@pytest.fixture(scope="module")
def conversation_engine(tokenizer):
    """The conversation and answer-version tests' model (seed 7)."""
    return window_engine(tokenizer, seed=7)
