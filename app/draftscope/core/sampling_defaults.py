"""The sampling an answer is drawn with, decided in one place for every face: the settings' values,
with what the model's own files recommend in place of them while ``model_sampling`` is on
(models/recommended_sampling.py), and a request's own fields (the server's) over both.

A model's authors tune its sampling (Qwen2.5: temperature 0.7, top-p 0.8, top-k 20, penalty 1.05);
where its files say nothing, the settings' defaults are LM Studio's and Ollama's (rules.SamplingParams).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from draftscope.rules import SAMPLING_FIELDS, SamplingParams, seed_from_setting

# The settings a model's recommendation may set: SamplingParams' tuned fields, in their order.
MODEL_FIELDS = tuple(SAMPLING_FIELDS)


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


def sampling_from(settings, recommended=None, **overrides) -> SamplingParams:
    """An answer's sampling: ``effective_sampling``, with ``overrides`` over it by SamplingParams'
    names (a request's own fields, a new seed; None: not given). The seed: the override's, else the
    settings' fixed one, else None (the engine draws one and reports it)."""
    unknown = sorted(set(overrides) - {f.name for f in fields(SamplingParams)})
    if unknown:
        raise ValueError(f"unknown sampling field(s): {', '.join(unknown)}")
    values = {**effective_sampling(settings, recommended).values, "seed": seed_from_setting(settings.seed)}
    values.update({name: value for name, value in overrides.items() if value is not None})
    return SamplingParams(**values)


def described(defaults: SamplingDefaults) -> str:
    """The model's values in words ("" when none are used): "temperature 0.7, top_p 0.8 (from ...)"."""
    if not defaults.from_model:
        return ""
    shown = ", ".join(f"{name} {defaults.values[name]:g}" for name in MODEL_FIELDS if name in defaults.from_model)
    return f"{shown} (the model's recommendation, from {defaults.origin})"
