"""The grammar engine's choice, measured (issue 65, item 1): llguidance against outlines-core on Qwen's
151,936-token vocabulary, for schemas of ``draftscope bench structured`` (bench/structured_prompts.jsonl).

For each engine and schema: the vocabulary's build (once per model), the schema's compile (llguidance:
the grammar and its matcher, whose lexer is built lazily, so its first masks carry the rest; outlines-core:
the regex and its Index over the whole vocabulary, built ahead), then along a real valid JSON answer
(written here, checked against the schema), each token's mask (the allowed-token bitmask the sampler
reads: llguidance's ``compute_bitmask``, as engine/grammar.py calls it; outlines-core's ``write_mask_into``
a preallocated array) and the step past the token: mean, p99 and worst per token. Both engines must take
every token of the answer, or the run fails.

The JSON style is the same for both: ", " and ": " and no other whitespace (engine/grammar.py's
JSON_STYLE; outlines-core's whitespace pattern "[ ]?"), and the answers are written as json.dumps writes.

xgrammar, the third candidate, was not measured: its Python package needs torch, transformers and triton
at import, which the llama.cpp build of Draftscope does not ship.

    pip install outlines-core   # not a dependency of Draftscope: only this measurement needs it
    python scripts/bench_grammar_masks.py [--tokenizer DIR] [--schemas ID,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from draftscope.bench.structured_check import check_json
from draftscope.bench.structured_prompts import load
from draftscope.engine.grammar import JSON_STYLE

QWEN_TOKENIZER = Path.home() / ".cache" / "draftscope" / "tokenizers" / "cc324af070c2ecbfd324a308"
QWEN_VOCABULARY = 151_936  # the logits' width (the tokenizer knows 151,665 of them)
ANSWERS = {  # a real answer to each prompt, as a model held to the schema writes it
    "doc-os-makedirs": {
        "name": "makedirs",
        "purpose": "Create a leaf directory and all intermediate ones.",
        "creates_parents": True,
        "when_it_exists": "raises unless exist_ok",
    },
    "doc-textwrap-wrap": {
        "name": "wrap",
        "purpose": "Wrap a single paragraph of text into lines of at most width characters.",
        "arguments": [
            {"name": "text", "description": "The paragraph to wrap."},
            {"name": "width", "description": "The longest a line may be (default 70)."},
            {"name": "**kwargs", "description": "Further TextWrapper options, such as tabsize and initial_indent."},
        ],
        "returns": "A list of output lines, without final newlines.",
    },
    "licence-history": {
        "releases": [
            {"release": "0.9.0 thru 1.2", "derived_from": "", "years": "1991-1995", "owner": "CWI",
             "gpl_compatible": True},
            {"release": "1.3 thru 1.5.2", "derived_from": "1.2", "years": "1995-1999", "owner": "CNRI",
             "gpl_compatible": True},
            {"release": "1.6", "derived_from": "1.5.2", "years": "2000", "owner": "CNRI", "gpl_compatible": False},
            {"release": "2.0", "derived_from": "1.6", "years": "2000", "owner": "BeOpen.com",
             "gpl_compatible": False},
            {"release": "1.6.1", "derived_from": "1.6", "years": "2001", "owner": "CNRI", "gpl_compatible": True},
            {"release": "2.1", "derived_from": "2.0+1.6.1", "years": "2001", "owner": "PSF", "gpl_compatible": False},
        ]
    },
}  # fmt: skip


def byte_of_char() -> dict[str, int]:
    """Byte-level BPE's spelling of bytes as characters: printable Latin-1 bytes stand for themselves,
    the others for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tokenizer_json: dict) -> tuple[dict[bytes, list[int]], int]:
    """Every ordinary token's bytes (special tokens left out: a grammar never allows them) and the end token."""
    chars = byte_of_char()
    specials = {a["content"]: a["id"] for a in tokenizer_json.get("added_tokens", [])}
    by_bytes: dict[bytes, list[int]] = {}
    for text, token in tokenizer_json["model"]["vocab"].items():
        if token not in specials.values():
            by_bytes.setdefault(bytes(chars[c] for c in text), []).append(token)
    return by_bytes, specials["<|im_end|>"] if "<|im_end|>" in specials else specials["<|endoftext|>"]


def per_token(seconds: list[float]) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "tokens": len(ms),
        "mean_ms": statistics.fmean(ms),
        "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
        "max_ms": ms[-1],
        "first_ms": seconds[0] * 1000,
        # llguidance builds its lexer at the first mask: the steady cost apart from that one
        "mean_after_first_ms": statistics.fmean(seconds[1:]) * 1000 if len(seconds) > 1 else None,
    }


class Llguidance:
    name = "llguidance"

    def __init__(self, tokenizer_text: str, eos: int) -> None:
        from llguidance import LLTokenizer

        self.vocabulary = LLTokenizer(tokenizer_text, n_vocab=QWEN_VOCABULARY, eos_token=[eos])

    def compile(self, schema: dict):
        from llguidance import LLMatcher

        matcher = LLMatcher(self.vocabulary, LLMatcher.grammar_from_json_schema(schema, JSON_STYLE), log_level=0)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        return matcher

    def walk(self, matcher, tokens: list[int]) -> list[float]:
        seconds = []
        for token in tokens:
            t0 = time.perf_counter()
            mask = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint32)
            seconds.append(time.perf_counter() - t0)
            if not (int(mask[token >> 5]) >> (token & 31)) & 1 or not matcher.consume_token(token):
                raise RuntimeError(f"llguidance refused token {token}")
        return seconds


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, by_bytes: dict[bytes, list[int]], eos: int) -> None:
        from outlines_core import Vocabulary

        self.vocabulary, self.eos = Vocabulary(eos, by_bytes), eos

    def compile(self, schema: dict):
        from outlines_core import Guide, Index
        from outlines_core.json_schema import build_regex_from_schema

        return Guide(Index(build_regex_from_schema(json.dumps(schema), "[ ]?"), self.vocabulary))

    def walk(self, guide, tokens: list[int]) -> list[float]:
        mask = np.zeros((QWEN_VOCABULARY + 31) // 32, dtype=np.int32)
        pointer, seconds = mask.ctypes.data_as(ctypes.c_void_p).value, []
        for token in tokens:
            t0 = time.perf_counter()
            guide.write_mask_into(pointer, mask.size, 4)
            seconds.append(time.perf_counter() - t0)
            if not (int(mask[token >> 5]) >> (token & 31)) & 1:
                raise RuntimeError(f"outlines-core refused token {token}")
            if token != self.eos:  # the end: allowed once the text is complete, with no state after it
                guide.advance(token, return_tokens=False)
        return seconds


def measure(engine, schema: dict, tokens: list[int]) -> dict:
    t0 = time.perf_counter()
    compiled = engine.compile(schema)
    compile_s = time.perf_counter() - t0
    return {"compile_s": compile_s, **per_token(engine.walk(compiled, tokens))}


def main() -> int:
    from tokenizers import Tokenizer

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", type=Path, default=QWEN_TOKENIZER, help="a folder with tokenizer.json")
    p.add_argument("--schemas", default=",".join(ANSWERS), help="prompt ids of bench/structured_prompts.jsonl")
    p.add_argument("--json", dest="json_out", default=None)
    args = p.parse_args()
    text = (args.tokenizer / "tokenizer.json").read_text(encoding="utf-8")
    tokenizer = Tokenizer.from_str(text)
    by_bytes, eos = token_bytes(json.loads(text))
    schemas = {row["id"]: row["schema"] for row in load() if row["kind"] == "extract"}
    engines, rows = [], []
    for make in (lambda: Llguidance(text, eos), lambda: OutlinesCore(by_bytes, eos)):
        t0 = time.perf_counter()
        engine = make()
        print(f"{engine.name}: its vocabulary ({QWEN_VOCABULARY} tokens) built in {time.perf_counter() - t0:.2f} s")
        engines.append(engine)
    print(f"{os.cpu_count()} cores; the answers are json.dumps's, tokenized as the model writes them")
    print(
        "| schema | engine | compile (s) | tokens | mask mean (ms) | p99 (ms) | worst (ms) | first (ms) | mean after it |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in [k for k in args.schemas.split(",") if k]:
        answer = json.dumps(ANSWERS[key])
        verdict = check_json(answer, schemas[key])
        if not verdict.valid:
            raise SystemExit(f"{key}: the answer written here is not valid: {verdict.why}")
        tokens = tokenizer.encode(answer, add_special_tokens=False).ids + [eos]
        for engine in engines:
            row = {"schema": key, "engine": engine.name, **measure(engine, schemas[key], tokens)}
            rows.append(row)
            print(
                f"| {key} | {engine.name} | {row['compile_s']:.3f} | {row['tokens']} | {row['mean_ms']:.3f} | "
                f"{row['p99_ms']:.3f} | {row['max_ms']:.3f} | {row['first_ms']:.3f} | {row['mean_after_first_ms']:.3f} |",
                flush=True,
            )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
