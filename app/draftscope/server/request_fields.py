"""Every field of OpenAI's chat and completions requests, and llama-server's common extensions, has one
fate here: honoured (read by server/protocol.py), inert (it changes nothing in an answer: accepted),
read under our name (llama-server's names for fields we have), or refused with a 400 naming it when set
to anything that would change the answer. A field a client sets is never silently ignored; a name in
none of these lists is not OpenAI's nor llama-server's, and is left alone as OpenAI's SDKs expect of
extensions. tests/server/test_request_fields.py walks the lists."""

from __future__ import annotations

from collections.abc import Collection

from draftscope.rules import CONTEXT_RANGE

HONOURED = frozenset(
    {
        "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n_predict", "stream",
        "stream_options", "stop", "seed", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
        "repetition_window", "response_format", "json_schema", "cache_prompt", "n", "suffix", "grammar",
        "logprobs", "top_logprobs", "n_probs", "tools", "functions", "tool_choice", "function_call",
        "parallel_tool_calls",
    }
)  # fmt: skip
# informational: what the client says of itself or of how the answer is kept elsewhere
INERT = frozenset({"user", "metadata", "store", "service_tier"})
# llama-server's (and Ollama's) names for fields of ours
ALIASES = {"repeat_penalty": "repetition_penalty", "repeat_last_n": "repetition_window"}
# refused unless set to a value that changes nothing (None always changes nothing)
REFUSED: dict[str, Collection] = {
    "logit_bias": ({},),
    "audio": ({},),
    "modalities": (["text"],),
    "prediction": ({},),
    "frequency_penalty": (0,),
    "presence_penalty": (0,),
    "reasoning_effort": (),
    "web_search_options": ({},),
    "echo": (False,),
    "best_of": (1,),
    # llama-server's samplers beyond ours
    "mirostat": (0,),
    "typical_p": (1,),
    "tfs_z": (1,),
    "dynatemp_range": (0,),
    "dry_multiplier": (0,),
    "xtc_probability": (0,),
    "ignore_eos": (False,),
    "samplers": (),
}
INSTEAD = {
    "frequency_penalty": "'repetition_penalty' is, as Settings ▸ Generation ▸ Repetition penalty",
    "presence_penalty": "'repetition_penalty' is, as Settings ▸ Generation ▸ Repetition penalty",
}


def refused(body: dict) -> str | None:
    """The first field ``body`` sets that Draftscope does not serve, or None."""
    for name, neutral in REFUSED.items():
        value = body.get(name)
        if value is not None and not any(value == n and type(value) is type(n) or _same(value, n) for n in neutral):
            return name
    return None


def _same(value, neutral) -> bool:
    """0 and 0.0, 1 and 1.0 are the same setting; True is not 1."""
    numbers = (int, float)
    return (
        isinstance(value, numbers)
        and isinstance(neutral, numbers)
        and not isinstance(value, bool)
        and not isinstance(neutral, bool)
        and value == neutral
    )


def with_our_names(body: dict) -> tuple[dict, str | None]:
    """``body`` with llama-server's names read as ours, or the alias that contradicts our own name.
    ``repeat_last_n`` as llama-server means it: 0 turns the penalty off, -1 is the whole context."""
    renamed = dict(body)
    for theirs, ours in ALIASES.items():
        value = renamed.pop(theirs, None)
        if value is None:
            continue
        if theirs == "repeat_last_n" and value in (0, -1):
            if value == 0:
                renamed["repetition_penalty"] = 1.0
                continue
            value = CONTEXT_RANGE.high
        if renamed.get(ours) is not None and renamed[ours] != value:
            return body, theirs
        renamed[ours] = value
    return renamed, None
