"""Rules every face shares, each written once: the backends and precisions a user may choose, the
context llama.cpp opens, and the sampling fields (SamplingParams: each one's range, default and
words) with the one check that applies them. Plain Python (no torch, no Qt): settings, the command
line, the server, the settings dialog and the engine all import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

BACKENDS = ("auto", "torch", "llama.cpp")  # what runs the model (auto: llama.cpp for a GGUF it can run)
DTYPES = ("auto", "float32", "bfloat16", "float16")  # the precision a torch model runs in
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

    def problem(self, name: str, value: float) -> str | None:
        """Why ``value`` cannot be the parameter ``name`` (None when it can)."""
        return None if self.holds(value) else f"{name} must be {self.words()}, got {value!r}"


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


@dataclass(frozen=True)
class SamplingField:
    """How one field of SamplingParams is set, checked and shown: every face reads it (the
    settings, the command line's options, the server's request fields, the settings dialog's rows,
    a model's recommended values). A field is whole-numbered when its ``default`` is an int."""

    range: Range
    default: float  # the app's value out of the box (the settings'); the field's own is its neutral one
    label: str  # the settings dialog's row ("Top-p"); with ``beside``, the words before its spin box
    what: str  # what it does, in the command line's help and the dialog's hint's tool tip
    off: str = ""  # the value that changes nothing, in words ("1 = off"): the dialog's hint
    unit: str = ""  # what it counts ("tokens"): the option's metavar, the words after its spin box
    step: float = 1  # the spin box's step
    low_text: str = ""  # what the spin box shows at the range's low end ("off")
    beside: str = ""  # the field whose row it shares (the penalty's window)
    gguf: str = ""  # the key a GGUF's metadata recommends it by (llama.cpp's general.sampling.*)
    hf: str = ""  # the key a generation_config.json recommends it by (transformers')
    server_range: Range | None = None  # where the server is narrower (OpenAI's API)

    @property
    def whole(self) -> bool:
        return isinstance(self.default, int)


def sampling_field(neutral: float, **how: Any) -> Any:
    """A tuned field of SamplingParams: ``neutral`` its own default (the value that changes nothing),
    ``how`` its SamplingField."""
    return field(default=neutral, metadata={"tuned": SamplingField(**how)})


@dataclass(frozen=True, kw_only=True)  # by name: the declaration's order is no contract
class SamplingParams:
    """How an answer is sampled, each tuned field declared once: its range, the app's default, its
    words. A new field is a line here and its filter in engine/sampling.py's processing; settings,
    options, request fields and dialog rows follow from the line (its setting: storage/settings.py).
    Its own defaults change nothing (greedy, no filter); the app's are LM Studio's and Ollama's (a
    light penalty, min-p: no loops)."""

    temperature: float = sampling_field(
        0.0,
        range=Range(0.0, 5.0),
        default=0.8,
        label="Temperature",
        what="randomness of the answer",
        off="0 = greedy: always the most likely token",
        step=0.05,
        gguf="general.sampling.temp",
        hf="temperature",
        server_range=Range(0.0, 2.0),  # OpenAI's: a request past it is a 400, as OpenAI answers it
    )
    top_p: float = sampling_field(
        1.0,
        range=Range(0.0, 1.0, open_low=True),
        default=0.95,
        label="Top-p",
        what="sample only from the most likely tokens whose probabilities add up to P (nucleus sampling)",
        off="1 = off",
        step=0.05,
        gguf="general.sampling.top_p",
        hf="top_p",
    )
    top_k: int = sampling_field(
        0,
        range=Range(0, 1_000_000),
        default=40,
        label="Top-k",
        what="sample only from the K most likely tokens",
        off="0 = off",
        low_text="off",
        gguf="general.sampling.top_k",
        hf="top_k",
    )
    min_p: float = sampling_field(
        0.0,
        range=Range(0.0, 1.0),
        default=0.05,
        label="Min-p",
        what="leave out tokens less likely than P times the most likely one",
        off="0 = off",
        step=0.01,
        gguf="general.sampling.min_p",
        hf="min_p",
    )
    repetition_penalty: float = sampling_field(
        1.0,
        range=Range(0.0, 10.0, open_low=True),
        default=1.1,
        label="Repetition penalty",
        what="above 1, tokens used within the last --repetition-window tokens become less likely",
        off="1 = off",
        step=0.05,
        gguf="general.sampling.penalty_repeat",
        hf="repetition_penalty",
    )
    repetition_window: int = sampling_field(
        REPETITION_WINDOW,
        range=Range(1, CONTEXT_RANGE.high),
        default=REPETITION_WINDOW,
        label="over the last",
        what="the tokens before each one the repetition penalty looks back over",
        unit="tokens",
        beside="repetition_penalty",
        gguf="general.sampling.penalty_last_n",
    )
    seed: int | None = None  # None: the engine draws one and reports it (the settings' NO_SEED)

    def __post_init__(self) -> None:
        for f in fields(self):
            tuned = f.metadata.get("tuned")
            if tuned is not None and (why := tuned.range.problem(f.name, getattr(self, f.name))) is not None:
                raise ValueError(why)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0


# The tuned fields, in their declared order: every face reads them from here.
SAMPLING_FIELDS: dict[str, SamplingField] = {
    f.name: f.metadata["tuned"] for f in fields(SamplingParams) if "tuned" in f.metadata
}
# The app's ranges: the settings, the command line and the engine use these.
RANGES = {
    **{name: declared.range for name, declared in SAMPLING_FIELDS.items()},
    "max_new_tokens": Range(UNTIL_STOP, 1_000_000),  # 0 = until the model stops
}
# Sampling out of the box, where the model recommends none of its own (core/sampling_defaults.py).
DEFAULT_SAMPLING = {name: declared.default for name, declared in SAMPLING_FIELDS.items()}

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


def problem(name: str, value: float) -> str | None:
    """Why ``value`` cannot be the parameter ``name`` of RANGES (None when it can)."""
    return RANGES[name].problem(name, value)


def seed_from_setting(value: int) -> int | None:
    """The settings' seed (NO_SEED: none) as the engine takes it."""
    return None if value < 0 else value  # NO_SEED; any other negative is refused by Settings.problems
