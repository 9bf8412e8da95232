"""A GGUF model's tokenizer, built from the file's own metadata without torch.

A GGUF carries its tokenizer as metadata (vocabulary, merges, token types, special ids, chat
template). ``AutoTokenizer.from_pretrained(..., gguf_file=...)`` builds it too, but through
transformers' GGUF reader, which imports torch. Here the metadata comes from our own bounded reader
(models/gguf_header.py), grouped as transformers' ``get_gguf_tokenizer`` groups it, and is handed to
transformers' own converter (``convert_gguf_tokenizer``), which knows each vocabulary's
normalizer, pre-tokenizer and decoder: llama.cpp and this tokenizer then give the same ids.
Built once per file and kept in a folder (load_tokenizer's cache).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tokenizers import Tokenizer, pre_tokenizers

from draftscope.models.gguf_header import GgufHeaderError, read_gguf_arrays, read_gguf_header

TOKENS = "tokenizer.ggml.tokens"
# which special token each id names (transformers' names; llama.cpp's keys)
SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}
BOS_EOS_RULES = ("add_bos_token", "add_eos_token")  # whether encoding puts BOS in front, EOS at the end
# Pre-tokenizers llama.cpp runs as "every digit alone, then GPT-2's split" (its regexes "\p{N}" and
# GPT-2's), which transformers' converter does not list: it would leave GPT-2's split alone, and
# " ½" would be one piece for transformers and two for llama.cpp. SmolLM2's and StarCoder's own
# tokenizer.json say the same as llama.cpp: Digits(individual_digits) before ByteLevel.
DIGITS_FIRST = frozenset({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"})
MARK = "draftscope-gguf-tokenizer.txt"  # in a kept folder: built here, not by the earlier conversion


class GgufTokenizerError(GgufHeaderError):
    """A GGUF whose header reads but describes no tokenizer that can be built: the words say why."""


def gguf_tokenizer(path):
    """The tokenizer (a transformers ``PreTrainedTokenizerFast``, with the file's chat template,
    special tokens and BOS/EOS rules) of the GGUF at ``path``. Raises GgufHeaderError naming the
    file when its header is damaged or describes a tokenizer transformers cannot build."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    path = Path(path)
    architecture, described, config = tokenizer_metadata(path)
    try:
        backend, extra = convert_gguf_tokenizer(architecture, described)
        _split_digits_first(backend, described)
        backend = _within_the_files_vocabulary(backend, len(described["tokens"]))
        return PreTrainedTokenizerFast(tokenizer_object=backend, **config, **extra)
    except Exception as exc:  # the file's values reach the library's builders unvetted: any fault is the file's
        raise GgufTokenizerError(f"{path.name}: its tokenizer cannot be built ({type(exc).__name__}: {exc})") from None


def _within_the_files_vocabulary(backend, size: int):
    """The builder's own defaults (GPT-2's ``<|endoftext|>``) are added past the file's tokens where the
    file lacks them: an id the model has no row for, and a vocabulary that no longer matches the model's
    (its datastores refused). Only the file's tokens stay."""
    if backend.get_vocab_size(with_added_tokens=True) <= size:
        return backend
    described = json.loads(backend.to_str())
    described["added_tokens"] = [t for t in described.get("added_tokens", []) if t["id"] < size]
    return Tokenizer.from_str(json.dumps(described))


def kept_gguf_tokenizer(path: Path, folder: Path):
    """The tokenizer of the GGUF at ``path``, kept in ``folder``: loaded from there when this code built
    it (its MARK), else built, saved there and loaded back. A folder the earlier transformers conversion
    wrote is built again: that one split no digits off where llama.cpp does (SmolLM2's " ½"), and it
    loads through AutoTokenizer, which imports torch wherever torch is installed (seconds at each load)."""
    from transformers import PreTrainedTokenizerFast

    if (folder / MARK).is_file() and (folder / "tokenizer_config.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.part")  # two processes building at once keep apart
    gguf_tokenizer(path).save_pretrained(str(partial))
    (partial / MARK).write_text("built by Draftscope from the GGUF's own tokenizer metadata\n")
    shutil.rmtree(folder, ignore_errors=True)  # an earlier conversion's, replaced
    try:
        partial.replace(folder)
    except OSError:  # another process kept its own meanwhile: the same tokenizer
        shutil.rmtree(partial, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def tokenizer_metadata(path: Path) -> tuple[str, dict, dict]:
    """``(architecture, tokenizer, tokenizer_config)`` of the GGUF at ``path``, grouped and renamed
    as transformers' ``get_gguf_tokenizer`` does (``GGUF_TOKENIZER_MAPPING``), read by our reader."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING

    header = read_gguf_header(path)
    if TOKENS not in header.arrays:
        raise GgufTokenizerError(f"{path.name} holds no tokenizer (no {TOKENS} in its metadata)")
    if header.architecture is None:
        raise GgufTokenizerError(f"{path.name} names no general.architecture")
    wanted = [f"tokenizer.{key}" for renames in GGUF_TOKENIZER_MAPPING.values() for key in renames]
    metadata = {**header.values, **read_gguf_arrays(path, [key for key in wanted if key in header.arrays])}
    tokens = metadata[TOKENS]
    if not all(isinstance(token, str) for token in tokens):
        raise GgufTokenizerError(f"{path.name}: {TOKENS} is not a list of strings")
    grouped = {
        group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    described, config = grouped["tokenizer"], grouped["tokenizer_config"]
    for rule in BOS_EOS_RULES:  # the mapping lists them only from transformers 5.23
        if f"tokenizer.ggml.{rule}" in metadata:
            config.setdefault(rule, metadata[f"tokenizer.ggml.{rule}"])
    kind = described.get("tokenizer_type")
    if kind == "llama":  # llama.cpp adds BOS to a sentencepiece vocabulary that does not say otherwise
        config.setdefault("add_bos_token", True)
    elif kind == "gemma4":  # its chat template writes <bos> itself (transformers follows the reference)
        config["add_bos_token"] = False
    for name, key in SPECIAL_IDS.items():
        config[name] = _special_token(path, tokens, key, metadata.get(key))
    return header.architecture, described, config


def _special_token(path: Path, tokens: list, key: str, token_id) -> str | None:
    """The token ``key`` names, or None when the file names none."""
    if token_id is None:
        return None
    if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
        raise GgufTokenizerError(f"{path.name}: {key} is {token_id!r}, not one of its {len(tokens):,} tokens")
    return tokens[token_id]


def _split_digits_first(backend, described: dict) -> None:
    """For the byte-level vocabularies whose pre-tokenizer is one of DIGITS_FIRST, every digit becomes
    a piece of its own before GPT-2's split, as llama.cpp does (left alone where transformers has
    its own split for it)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    pre = described.get("pre_tokenizer_type")
    if described.get("tokenizer_type") != "gpt2" or pre not in DIGITS_FIRST or pre in GGUF_PRE_TOKENIZER_SPLITS:
        return
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
