"""Argument types shared by every command, so a bad value is an argparse error (usage, exit 2)
before anything loads, in the same words everywhere."""

from __future__ import annotations

import argparse
import re

from draftscope.rules import (
    DTYPES,
    GPU_LAYERS_ALL,
    GPU_LAYERS_AUTO,
    SAMPLING_FIELDS,
    context_problem,
    gpu_layers_problem,
)
from draftscope.storage.settings import MAX_PARALLEL

LIMIT = 10**9  # no count a command takes is this large; bigger is a typo, not a request


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def positive_int(text: str) -> int:
    value = _whole(text)
    if not 1 <= value <= LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {LIMIT:,}, got {value}")
    return value


def count(text: str) -> int:
    """A whole number >= 0 (0 usually means off)."""
    value = _whole(text)
    if not 0 <= value <= LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 0 and {LIMIT:,}, got {value}")
    return value


def context(text: str) -> int:
    """A context length in tokens: 0 (the model's default) or within rules.CONTEXT_RANGE."""
    value = _whole(text)
    why = context_problem(value)
    if why is not None:
        raise argparse.ArgumentTypeError(why.removeprefix("context_length "))
    return value


def gpu_layers(text: str) -> int:
    """llama.cpp's layers on the card: auto (as many as fit), all, or a count (0: none)."""
    named = {"auto": GPU_LAYERS_AUTO, "all": GPU_LAYERS_ALL}
    value = named.get(text.strip().lower())
    if value is None:
        value = int(text) if re.fullmatch(r"\s*\d+\s*", text) else -2
        if value < 0 or gpu_layers_problem(value) is not None:
            raise argparse.ArgumentTypeError(
                f"must be auto (as many as fit), all, or a count of layers from 0 to {GPU_LAYERS_ALL}, got {text!r}"
            )
    return value


def sampling(name: str):
    """A sampling field within its declared range (rules.SamplingParams), a whole number where the
    field is one, named as the settings name it."""
    declared = SAMPLING_FIELDS[name]

    def parse(text: str) -> float:
        try:
            value = _whole(text) if declared.whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not declared.range.holds(value):  # NaN included: it holds nowhere
            raise argparse.ArgumentTypeError(f"must be {declared.range.words()}, got {text}")
        return value

    parse.__name__ = name  # argparse names the type in its error: "invalid top_p value"
    return parse


def port(text: str) -> int:
    """A TCP port (0: any free one)."""
    value = _whole(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port between 0 and 65535, got {value}")
    return value


def parallel(text: str) -> int:
    """Answers at once: as many as the settings allow."""
    value = _whole(text)
    if not 1 <= value <= MAX_PARALLEL:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_PARALLEL}, got {value}")
    return value


def device(text: str) -> str:
    if text == "auto" or re.fullmatch(r"cpu|mps|cuda(:\d+)?", text):
        return text
    raise argparse.ArgumentTypeError(f"unknown device {text!r} (cpu, cuda, cuda:N, mps or auto)")


def dtype(text: str) -> str:
    if text in DTYPES:
        return text
    raise argparse.ArgumentTypeError(f"unknown dtype {text!r} (one of {', '.join(DTYPES)})")
