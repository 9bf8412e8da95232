"""Fixtures the drafter tests share."""

import pytest
from engine_fixtures import tiny_llama


@pytest.fixture(scope="module")
def model(tokenizer):
    """The recurrent drafter's target, on torch and on llama.cpp: a peaked tiny Llama, its answers
    predictable enough for a small head to learn them."""
    return tiny_llama(len(tokenizer), seed=5, sharpen=8.0, eos_token_id=tokenizer.eos_token_id)
