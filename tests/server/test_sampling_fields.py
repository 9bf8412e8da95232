"""The server takes every sampling field SamplingParams declares, as llama-server and vLLM do beyond
OpenAI's (``top_k``, vLLM's -1: off; ``min_p``; ``repetition_penalty`` and its window) and the
seed; the answer is sampled with them over the settings' values; a value out of its range is a 400
naming the field."""

from types import SimpleNamespace

import pytest

from draftscope.core.session import ChatSession
from draftscope.rules import SAMPLING_FIELDS
from draftscope.server.protocol import ApiError, parse_chat
from draftscope.storage import Settings

MESSAGES = [{"role": "user", "content": "hi"}]
GIVEN = {"top_k": 20, "min_p": 0.3, "repetition_penalty": 1.3, "repetition_window": 16, "seed": 7}


def sampling(**fields):
    return parse_chat({"messages": MESSAGES, **fields}).sampling


def answered_with(**fields):
    """The sampling the engine is handed for a request with ``fields`` (asgi: the request's fields
    over the live settings), the settings being the app's defaults."""
    runtime = SimpleNamespace(settings=Settings(), recommended=None)
    return ChatSession(runtime).sampling(**sampling(**fields).overrides)


def test_every_declared_field_and_the_seed_are_read():
    assert sampling(**GIVEN).overrides == GIVEN
    assert sampling(top_k=-1).overrides == {"top_k": 0}, "vLLM's -1 is off, as the app's 0"
    assert sampling().overrides == {}, "left out: the settings' (or the model's) values"
    assert set(SAMPLING_FIELDS) <= set(sampling(**{name: d.default for name, d in SAMPLING_FIELDS.items()}).overrides)


def test_a_request_s_fields_are_what_the_answer_is_sampled_with():
    defaults = answered_with()
    assert (defaults.min_p, defaults.repetition_penalty) == (pytest.approx(0.05), pytest.approx(1.1))
    asked = answered_with(**GIVEN, temperature=0.5)
    assert (asked.top_k, asked.min_p, asked.repetition_penalty, asked.repetition_window, asked.seed) == (
        20,
        0.3,
        1.3,
        16,
        7,
    )
    assert (asked.temperature, asked.top_p) == (0.5, pytest.approx(0.95)), "what it left out is the settings'"


@pytest.mark.parametrize(
    "field,value",
    [
        ("min_p", 1.5),
        ("min_p", -0.1),
        ("min_p", "0.1"),
        ("top_k", 2.5),
        ("top_k", -2),
        ("top_k", True),
        ("repetition_penalty", 0),
        ("repetition_penalty", 11.0),
        ("repetition_window", 0),
        ("repetition_window", 1.5),
        ("temperature", 2.5),
        ("top_p", float("nan")),
    ],
)
def test_a_value_out_of_range_is_a_400_naming_the_field(field, value):
    with pytest.raises(ApiError) as refused:
        sampling(**{field: value})
    assert refused.value.status == 400 and refused.value.param == field and f"'{field}'" in refused.value.message
