"""The sampling an answer is drawn with, decided in one place for every face: the settings' values,
with what the model's own files recommend in place of them while ``model_sampling`` is on
(models/recommended_sampling.py), and a request's own fields (the server's) over both.

A model's authors tune its sampling (Qwen2.5: temperature 0.7, top-p 0.8, top-k 20, penalty 1.05);
where its files say nothing, the settings' defaults are LM Studio's and Ollama's (rules.DEFAULT_SAMPLING).
"""

from __future__ import annotations

from dataclasses import dataclass

from draftscope.engine.sampling import SamplingParams
from draftscope.rules import DEFAULT_SAMPLING, seed_from_setting

# The settings a model's recommendation may set, in the order the settings show them.
MODEL_FIELDS = tuple(DEFAULT_SAMPLING)


@dataclass(frozen=True)
class SamplingDefaults:
    """Each sampling value an answer uses when its request sets none, and which came from the model."""

    values: dict  # setting name -> value, for every name in MODEL_FIELDS
    from_model: frozenset = frozenset()  # the names whose value is the model's recommendation
    origin: str = ""  # where the model's values were read ("" when none were used)


def effective_sampling(settings, recommended=None) -> SamplingDefaults:
    """The settings' sampling, the model's recommended values (a ModelSampling, or None) in place of
    theirs while ``settings.model_sampling`` is on."""
    values = {name: getattr(settings, name) for name in MODEL_FIELDS}
    taken = {}
    if settings.model_sampling and recommended is not None:
        taken = {name: value for name, value in recommended.values.items() if name in values}
    values.update(taken)
    return SamplingDefaults(values, frozenset(taken), recommended.origin if taken else "")


def sampling_from(
    settings,
    recommended=None,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
) -> SamplingParams:
    """An answer's sampling: ``effective_sampling``, with per-request overrides (the server's fields).
    The seed: the request's, else the settings' fixed one, else None (the engine draws one and reports it)."""
    values = dict(effective_sampling(settings, recommended).values)
    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p}
    values.update({name: value for name, value in given.items() if value is not None})
    return SamplingParams(**values, seed=seed_from_setting(settings.seed) if seed is None else seed)


def described(defaults: SamplingDefaults) -> str:
    """The model's values in words ("" when none are used): "temperature 0.7, top_p 0.8 (from ...)"."""
    if not defaults.from_model:
        return ""
    shown = ", ".join(f"{name} {defaults.values[name]:g}" for name in MODEL_FIELDS if name in defaults.from_model)
    return f"{shown} (the model's recommendation, from {defaults.origin})"
