"""The sampling a model's own files recommend: a GGUF's ``general.sampling.*`` metadata (llama.cpp's
keys) or a Hugging Face folder's ``generation_config.json``. Values are named as the settings name
them (temperature, top_k, top_p, min_p, repetition_penalty, repetition_window); one that is damaged
or out of the app's range is left out with a log line, and a file that cannot be read recommends
nothing. core/sampling_defaults.py decides what an answer then uses.

A GGUF's metadata comes from the one header reader (models/gguf_header.py), read once per load.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from draftscope.models.gguf_header import GgufHeaderError, read_gguf_header
from draftscope.models.resolve import ModelSource, resolve_model
from draftscope.rules import RANGES, SAMPLING_FIELDS, problem

log = logging.getLogger(__name__)

# llama.cpp's names (gguf-py's Keys.General.SAMPLING_*) and generation_config.json's (transformers'
# GenerationConfig) -> the settings' names, as SamplingParams declares them
GGUF_KEYS = {declared.gguf: name for name, declared in SAMPLING_FIELDS.items() if declared.gguf}
HF_KEYS = {declared.hf: name for name, declared in SAMPLING_FIELDS.items() if declared.hf}
WHOLE_NUMBERS = tuple(name for name, declared in SAMPLING_FIELDS.items() if declared.whole)
WHOLE_CONTEXT = -1  # penalty_last_n -1: the penalty covers the whole context (llama.cpp)
NO_PENALTY_WINDOW = 0  # penalty_last_n 0: no penalty at all (llama.cpp)


@dataclass(frozen=True)
class ModelSampling:
    """What a model recommends (only what its files set), and where it was read."""

    values: dict = field(default_factory=dict)  # setting name -> value, each within rules.RANGES
    origin: str = ""  # "the GGUF's metadata", "generation_config.json"

    def without(self, names) -> ModelSampling:
        """The recommendation less ``names`` (what the user set explicitly, e.g. on the command line)."""
        return ModelSampling({k: v for k, v in self.values.items() if k not in set(names)}, self.origin)


def recommended_sampling(source: ModelSource) -> ModelSampling | None:
    """The sampling ``source``'s files recommend; None when they recommend none or cannot be read."""
    try:
        if source.kind == "gguf":
            raw, origin = gguf_sampling(Path(source.location)), "the GGUF's metadata"
        else:
            config = _generation_config_file(source)
            if config is None:
                return None
            raw, origin = _from_generation_config(config), "generation_config.json"
    except (OSError, ValueError) as exc:
        log.warning("%s: its recommended sampling was not read: %s", source.display_name, exc)
        return None
    values = checked(raw, source.display_name)
    return ModelSampling(values, origin) if values else None


def recommended_for(model: str) -> ModelSampling | None:
    """The recommendation of the model the settings name (nothing fetched; None when it is not here)."""
    try:
        source = resolve_model(model, fetch_default=False)
    except (OSError, ValueError) as exc:
        log.info("%s: no recommended sampling (%s)", model, exc)
        return None
    return recommended_sampling(source)


def checked(raw: dict, name: str) -> dict:
    """``raw`` (setting name -> value as read) less values of the wrong kind or out of range, each
    ignored with a log line; llama.cpp's penalty windows -1 (the whole context) and 0 (no penalty)
    become the app's."""
    out = {}
    for key, value in raw.items():
        why = _value_problem(key, value)
        if why is not None:
            log.warning("%s: its recommended %s ignored: %s", name, key, why)
            continue
        out[key] = int(value) if key in WHOLE_NUMBERS else float(value)
    window = out.get("repetition_window")
    if window == WHOLE_CONTEXT:
        out["repetition_window"] = RANGES["repetition_window"].high
    elif window == NO_PENALTY_WINDOW:
        del out["repetition_window"]
        out["repetition_penalty"] = 1.0
    return out


def _value_problem(key: str, value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"not a number ({value!r})"
    if key in WHOLE_NUMBERS and value != int(value):
        return f"not a whole number ({value!r})"
    if key == "repetition_window" and value in (WHOLE_CONTEXT, NO_PENALTY_WINDOW):
        return None
    return problem(key, value)


# ---------------------------------------------------------------------- Hugging Face


def _generation_config_file(source: ModelSource) -> Path | None:
    if source.kind == "folder":
        path = Path(source.location) / "generation_config.json"
        return path if path.is_file() else None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(source.location, "generation_config.json")  # the cache only: no download
    return Path(found) if isinstance(found, str) else None


def _from_generation_config(path: Path) -> dict:
    """The sampling fields of a generation_config.json. ``do_sample: false`` means greedy only
    beside a temperature the file sets: transformers writes it by default, and alone it says
    nothing the authors chose (taken as temperature 0, it brought greedy looping back)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path.name} is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    raw = {ours: config[theirs] for theirs, ours in HF_KEYS.items() if config.get(theirs) is not None}
    if config.get("do_sample") is False and "temperature" in raw:  # transformers then decodes greedily
        raw["temperature"] = 0.0
    return raw


# ---------------------------------------------------------------------- GGUF


def gguf_sampling(path: Path) -> dict:
    """The ``general.sampling.*`` values of the GGUF at ``path``, by the settings' names (as read)."""
    return {GGUF_KEYS[k]: v for k, v in read_gguf_metadata(path, set(GGUF_KEYS)).items()}


def read_gguf_metadata(path: Path, wanted: set[str]) -> dict:
    """The numeric values of the ``wanted`` keys in the GGUF at ``path`` (models/gguf_header.py).
    Raises ValueError on a damaged or foreign file."""
    try:
        values = read_gguf_header(path).values
    except GgufHeaderError as exc:
        raise ValueError(f"{path.name} is not a readable GGUF: {exc}") from None
    found = {}
    for key in sorted(wanted & set(values)):
        if isinstance(values[key], (int, float)):
            found[key] = values[key]
        else:
            log.warning("GGUF metadata %s ignored: not a number", key)
    return found
