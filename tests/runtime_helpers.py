"""Runtimes around engines the tests build themselves (draftscope.core.runtime.Runtime)."""

from __future__ import annotations

from draftscope.core.runtime import Runtime
from draftscope.storage import Settings

# Drafts from the conversation only: what tests on tiny models draft with unless they say otherwise.
CONTEXT_ONLY = {"retrieval": False, "learned": False, "context": True, "model": False, "recurrent": False}
# The sampling tests on tiny models were written for, unless they say otherwise: greedy, no penalty, at
# most 512 tokens (the app's own defaults sample, and run until the model stops: rules.DEFAULT_SAMPLING).
GREEDY = {
    "temperature": 0.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "max_new_tokens": 512,
    "model_sampling": False,
    "stop_loops": False,  # the tiny random models loop: tests that want the guard ask for it
}


def runtime_for(engine, settings: Settings | None = None, *, drafters=None, **fields) -> Runtime:
    """A runtime over ``engine``: ``settings`` (default: context drafts only, greedy, no read ahead in a
    window, with ``fields``); ``drafters``, a function making drafters of the test's own (e.g. a
    slowed one). A window's read ahead, between a test's steps, would change what the model is fed
    next: the tests of it ask for it (``read_ahead=True``)."""
    if settings is None:
        settings = Settings(**{"drafters": dict(CONTEXT_ONLY), "read_ahead": False, **GREEDY, **fields})
    runtime = Runtime(settings, engine)
    if drafters is not None:
        runtime.make_drafters = drafters  # the test's own drafters instead of the settings'
    return runtime
