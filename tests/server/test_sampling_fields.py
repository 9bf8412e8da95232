"""The server takes llama-server's and vLLM's sampling fields beyond OpenAI's: ``top_k`` (vLLM's -1:
off) and ``min_p``; a value out of the app's range is a 400 naming the field."""

import pytest

from draftscope.server.protocol import ApiError, parse_chat

MESSAGES = [{"role": "user", "content": "hi"}]


def sampling(**fields):
    return parse_chat({"messages": MESSAGES, **fields}).sampling


def test_top_k_and_min_p_are_read():
    got = sampling(top_k=20, min_p=0.05)
    assert (got.top_k, got.min_p) == (20, 0.05)
    assert sampling(top_k=-1).top_k == 0, "vLLM's -1 is off, as the app's 0"
    left_out = sampling()
    assert (left_out.top_k, left_out.min_p) == (None, None), "left out: the settings' (or the model's) values"


@pytest.mark.parametrize(
    "field,value", [("min_p", 1.5), ("min_p", -0.1), ("min_p", "0.1"), ("top_k", 2.5), ("top_k", -2), ("top_k", True)]
)
def test_a_value_out_of_range_is_a_400_naming_the_field(field, value):
    with pytest.raises(ApiError) as refused:
        sampling(**{field: value})
    assert refused.value.status == 400 and refused.value.param == field and field in refused.value.message
