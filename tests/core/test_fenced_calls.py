"""Qwen2.5-Coder-1.5B, free to call, writes its call as a ```json fence, often with words after it: an
answer that opens with such a fence naming an offered tool is that call, the words after it content;
any other fence, or a fence after text, is what the model said."""

from __future__ import annotations

import json

import pytest

from draftscope.core.tool_calls import CallReader
from draftscope.core.tool_formats import FORMATS

HERMES = FORMATS[0]
CALL = '{"name": "read_note", "arguments": {"name": "plan"}}'


def read(text: str, step: int = 3) -> tuple[list[dict], str, str]:
    """The calls, the content, and the content as it streamed, pushing ``step`` characters at a time."""
    reader = CallReader(HERMES, frozenset({"read_note"}))
    deltas = [d for i in range(0, len(text), step) for d in reader.push(text[i : i + step])] + reader.finish()
    streamed = "".join(d.get("content", "") for d in deltas)
    return [c.as_dict()["function"] for c in reader.calls], reader.content, streamed


@pytest.mark.parametrize("fence", ["```json\n", "```\n", "  ```json \n"])
def test_an_answer_that_is_one_fenced_call_is_that_call(fence):
    calls, content, streamed = read(f"{fence}{CALL}\n```\n")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("read_note", {"name": "plan"})]
    assert content == streamed == ""


def test_words_after_a_fenced_call_are_content_and_stream_once_the_fence_closes():
    reader = CallReader(HERMES, frozenset({"read_note"}))
    assert reader.push(f"```json\n{CALL}\n") == []  # held: it may be a call
    deltas = reader.push("```\n\nNote: the note is")
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas if "tool_calls" in d] == ["read_note"]
    rest = deltas + reader.push(" short.") + reader.finish()
    assert "".join(d.get("content", "") for d in rest) == reader.content == "Note: the note is short."


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"name": "delete_all", "arguments": {}}\n```',  # not an offered tool
        "```python\nprint('hi')\n```",  # code, not a call
        f"Here it is: ```json\n{CALL}\n```",  # text before the fence
        '```json\n{"name": "read_note", "arguments": [1]}\n```',  # arguments not an object
    ],
)
def test_any_other_fence_is_content_streamed_whole(text):
    calls, content, streamed = read(text)
    assert calls == []
    assert content == streamed == text
