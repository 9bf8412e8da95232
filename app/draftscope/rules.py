"""Rules every face shares, each written once: the backends and precisions a user may choose, the
context llama.cpp opens, and the sampling parameters' ranges with the one check that applies them.
Plain Python (no torch, no Qt): settings, the command line, the server and the engine all import it.
"""

from __future__ import annotations

BACKENDS = ("auto", "torch", "llama.cpp")  # what runs the model (auto: llama.cpp for a GGUF it can run)
DTYPES = ("auto", "float32", "bfloat16", "float16")  # the precision a torch model runs in
DRAFTER_NAMES = ("retrieval", "learned", "context", "model", "recurrent")  # the drafters a user switches
DRAFTERS_ON = ("retrieval", "learned", "context", "recurrent")  # what the app drafts with out of the box
LLAMA_CONTEXT = 4096  # tokens of context the llama.cpp backend opens (and the catalogue's memory estimate)


class Range:
    """Values a sampling parameter may take: [low, high], or (low, high] with ``open_low``."""

    def __init__(self, low: float, high: float, *, open_low: bool = False) -> None:
        self.low, self.high, self.open_low = low, high, open_low

    def holds(self, value: float) -> bool:
        return (self.low < value if self.open_low else self.low <= value) and value <= self.high

    def words(self) -> str:
        low, high = (f"{x:,}" if isinstance(x, int) else f"{x:g}" for x in (self.low, self.high))
        return f"in ({low}, {high}]" if self.open_low else f"between {low} and {high}"


# The context: tokens the model reads at once (the conversation, attached files and the answer);
# its KV cache grows with it. MODEL_CONTEXT (0) keeps the model's default: LLAMA_CONTEXT on
# llama.cpp, the model's own on torch; a backend never opens more than the model was trained on.
MODEL_CONTEXT = 0
CONTEXT_RANGE = Range(256, 1 << 20)

# The repetition penalty covers the last REPETITION_WINDOW tokens before each position (llama.cpp's
# repeat_last_n, LM Studio's and Ollama's 64): a word used a moment ago is discouraged, while copying
# from the prompt (an attached file being edited, code being quoted) is not punished as Hugging
# Face's rule over the whole context would punish it.
REPETITION_WINDOW = 64
# The answer's length limit: UNTIL_STOP (0) lets it run until the model stops, bounded by the context.
UNTIL_STOP = 0

# The app's ranges: the settings, their spin boxes, the command line and the engine use these.
RANGES = {
    "temperature": Range(0.0, 5.0),  # 0 = greedy
    "top_p": Range(0.0, 1.0, open_low=True),  # 1 = off
    "top_k": Range(0, 1_000_000),  # 0 = off
    "min_p": Range(0.0, 1.0),  # 0 = off
    "repetition_penalty": Range(0.0, 10.0, open_low=True),  # 1 = off
    "repetition_window": Range(1, CONTEXT_RANGE.high),  # tokens before each position the penalty covers
    "max_new_tokens": Range(UNTIL_STOP, 1_000_000),  # 0 = until the model stops
}
# Sampling out of the box (LM Studio's and Ollama's defaults: a light penalty, min-p, no loops), where
# the model recommends none of its own (core/sampling_defaults.py).
DEFAULT_SAMPLING = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "repetition_window": REPETITION_WINDOW,
}
# The server follows OpenAI's API where it is narrower than the app (a request past it is a 400,
# as OpenAI answers it): temperature up to 2.
SERVER_RANGES = {**RANGES, "temperature": Range(0.0, 2.0)}

# The seed: an int; None where none was chosen (a new one is drawn for each sampled answer and
# shown with it). The settings file and its spin box write "none" as -1 (NO_SEED).
NO_SEED = -1
SEED_RANGE = Range(0, 2**31 - 1)

# GPU layers: how many of a GGUF model's layers llama.cpp puts on the card (engine/backends/llama/gpu_offload.py).
# GPU_LAYERS_AUTO (-1): as many as fit in the card's free memory (the default); 0: none, the CPU only;
# a count above the model's layers puts all of them there, its output head too (GPU_LAYERS_ALL).
GPU_LAYERS_AUTO = -1
GPU_LAYERS_ALL = 999
GPU_LAYERS_RANGE = Range(GPU_LAYERS_AUTO, GPU_LAYERS_ALL)


def gpu_layers_problem(value: int) -> str | None:
    """Why ``value`` cannot be the GPU-layers setting (None when it can)."""
    if isinstance(value, int) and not isinstance(value, bool) and GPU_LAYERS_RANGE.holds(value):
        return None
    return (
        f"gpu_layers must be {GPU_LAYERS_AUTO} (as many as fit on the card), 0 (none) or a count of layers up to "
        f"{GPU_LAYERS_ALL} (all), got {value!r}"
    )


def context_problem(value: int) -> str | None:
    """Why ``value`` cannot be the context length (None when it can)."""
    if value == MODEL_CONTEXT or CONTEXT_RANGE.holds(value):
        return None
    return (
        f"context_length must be {MODEL_CONTEXT} (the model's default) or {CONTEXT_RANGE.words()} tokens, got {value!r}"
    )


def problem(name: str, value: float, ranges: dict[str, Range] = RANGES) -> str | None:
    """Why ``value`` cannot be the parameter ``name`` (None when it can)."""
    allowed = ranges[name]
    return None if allowed.holds(value) else f"{name} must be {allowed.words()}, got {value!r}"


def seed_from_setting(value: int) -> int | None:
    """The settings' seed (NO_SEED: none) as the engine takes it."""
    return None if value < 0 else value  # NO_SEED; any other negative is refused by Settings.problems
