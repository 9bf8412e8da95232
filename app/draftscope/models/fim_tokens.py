"""A code model's fill-in-the-middle tokens, and a FIM prompt made of them.

A model trained to fill in the middle reads the code before the cursor and the code after it, each behind a
marker token, then a third marker after which it writes the middle: prefix, suffix, middle (the order of
Bavarian et al., 2022, which every family below uses). The markers are special tokens of the tokenizer, spelled
per family (``FAMILIES``); where a GGUF names them (llama.cpp's converter writes
``tokenizer.ggml.fim_pre_token_id`` and its kin) the file's ids are taken first. A middle ends at the model's
end of text, or at a token the model writes only past the middle (padding, the next file's separator, another
marker): ``FimTokens.ends``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from draftscope.models.gguf_header import GgufHeaderError, read_gguf_header
from draftscope.models.resolve import ModelSource


class Family(NamedTuple):
    name: str
    prefix: str
    suffix: str
    middle: str
    ends: tuple[str, ...]  # the tokens past the middle that are not the model's EOS


# every family's markers, as its tokenizer spells them
FAMILIES = (
    Family("Qwen Coder", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
           ("<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<|endoftext|>")),
    Family("StarCoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
           ("<fim_pad>", "<reponame>", "<file_sep>", "<filename>", "<|endoftext|>")),
    Family("SantaCoder", "<fim-prefix>", "<fim-suffix>", "<fim-middle>", ("<fim-pad>", "<|endoftext|>")),
    Family("Code Llama", "▁<PRE>", "▁<SUF>", "▁<MID>", ("▁<EOT>",)),
    Family("Code Llama (GGUF)", "<PRE>", "<SUF>", "<MID>", ("<EOT>",)),
    Family("DeepSeek Coder", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", ("<｜end▁of▁sentence｜>",)),
)  # fmt: skip

# the GGUF's own ids of the three markers (llama.cpp's names, then the older ones it still reads)
GGUF_MARKERS = (
    ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id"),
    ("tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id", "tokenizer.ggml.middle_token_id"),
)
GGUF_ENDS = (
    "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id",
    "tokenizer.ggml.eot_token_id",
)


class NoFillInTheMiddle(ValueError):
    """The model has no fill-in-the-middle tokens; the words say which model and what it lacks."""


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int
    ends: frozenset[int]  # tokens that end the middle besides the model's EOS (the markers included)
    family: str  # whose spelling was found, or "GGUF" where the file named the ids

    def prompt(self, tokenizer: Any, before: str, after: str) -> list[int]:
        """The model's FIM prompt: its leading special tokens (a BOS where its tokenizer adds one), then
        prefix marker, ``before``, suffix marker, ``after``, middle marker. No chat template: a FIM model
        was trained on exactly this."""
        leading = list(tokenizer("", add_special_tokens=True)["input_ids"])
        return [
            *leading,
            self.prefix,
            *_ids(tokenizer, before),
            self.suffix,
            *_ids(tokenizer, after),
            self.middle,
        ]


def fim_tokens(tokenizer: Any, gguf: str | Path | None = None) -> FimTokens:
    """The FIM tokens of the model whose tokenizer is ``tokenizer`` (and whose file is ``gguf``, for a
    GGUF model: its ids are taken first). Raises NoFillInTheMiddle for a model without them."""
    width = len(tokenizer)
    found = _family(tokenizer)
    named = _gguf_ids(gguf, width) if gguf is not None else None
    if named is not None:
        markers, ends = named
        if found is not None:  # the family's spellings of its ends, where the file names fewer
            ends |= found.ends
        return FimTokens(*markers, ends=frozenset(ends | set(markers)), family="GGUF")
    if found is not None:
        return found
    raise NoFillInTheMiddle(
        "this model has no fill-in-the-middle tokens (its tokenizer has none of "
        + ", ".join(f"{f.prefix} {f.suffix} {f.middle}" for f in FAMILIES[:3])
        + ", ...): a code model trained for it (Qwen2.5-Coder, StarCoder2, Code Llama) fills in a middle"
    )


def past_the_middle(tokenizer: Any) -> frozenset[int]:
    """The tokens a FIM model writes only once past a middle (padding, the next file, the end of text): end
    tokens of every answer, as llama.cpp counts them (its end-of-generation set); none for other models."""
    found = _family(tokenizer)
    return found.ends - {found.prefix, found.suffix, found.middle} if found is not None else frozenset()


def gguf_file(source: object) -> Path | None:
    """The GGUF file a backend was opened from (its ``source``, a ModelSource), or None."""
    return source.gguf_path if isinstance(source, ModelSource) and source.kind == "gguf" else None


def _family(tokenizer: Any) -> FimTokens | None:
    """The first family whose three markers are all tokens of ``tokenizer``."""
    for family in FAMILIES:
        markers = [_token_id(tokenizer, text) for text in (family.prefix, family.suffix, family.middle)]
        if None in markers:
            continue
        prefix, suffix, middle = (int(m) for m in markers if m is not None)
        ends = {e for e in (_token_id(tokenizer, text) for text in family.ends) if e is not None}
        return FimTokens(prefix, suffix, middle, frozenset(ends | {prefix, suffix, middle}), family.name)
    return None


def _gguf_ids(path: str | Path, width: int) -> tuple[tuple[int, int, int], set[int]] | None:
    """The three markers' ids and the end tokens a GGUF names, where it names all three within the vocabulary."""
    try:
        values = read_gguf_header(path).values
    except GgufHeaderError:
        return None  # the tokenizer's own tokens decide; the backend reports a damaged file itself
    ends = {e for e in _valid(values.get(key) for key in GGUF_ENDS) if e < width}
    for keys in GGUF_MARKERS:
        markers = _valid(values.get(key) for key in keys)
        if len(markers) == 3 and all(m < width for m in markers):
            return (markers[0], markers[1], markers[2]), ends
    return None


def _valid(values: Iterable[object]) -> list[int]:
    """The whole, non-negative ids among ``values`` (a GGUF writes -1 or leaves the key out for none)."""
    return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


def _token_id(tokenizer: Any, text: str) -> int | None:
    """The id of the token spelled ``text`` (None: not one token of this vocabulary, or a tokenizer that
    cannot look tokens up: ids only, it has no FIM tokens)."""
    lookup, spell = getattr(tokenizer, "convert_tokens_to_ids", None), getattr(tokenizer, "convert_ids_to_tokens", None)
    if lookup is None or spell is None:
        return None
    found = lookup(text)
    if not isinstance(found, int) or found < 0 or spell(found) != text:
        return None  # an unknown token comes back as the unknown token's id
    return found


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
