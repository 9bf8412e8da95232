"""What ``draftscope bench lossless`` audits: the model loaded, the drafter sets it can be audited
with (each available drafter alone, then all together, or those given), and the prompts."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import NamedTuple

DEFAULT_PROMPTS = [
    "Explain what a suffix array is and why it makes substring search fast.",
    "Write a short poem about the sea at night.",
    "Give three tips for writing clear emails.",
    "What is the difference between a list and a tuple in Python?",
    "Summarise the plot of Romeo and Juliet in a few sentences.",
    "How do vaccines train the immune system?",
    "Write a Python function that checks whether a string is a palindrome.",
    "Describe a good morning routine for a student.",
]


def _configs(text: str, names_available: list[str]) -> list[list[str]]:
    if text == "auto":
        alone = [[n] for n in names_available]
        return alone + ([names_available] if len(names_available) > 1 else [])
    from draftscope.core.drafter_factory import parse_drafter_names

    return [
        parse_drafter_names(c, have_datastore=True, have_draft_model=True, have_head=True)
        for c in text.split(";")
        if c.strip()
    ]


def _prompts(args, engine) -> list[list[int]]:
    texts = DEFAULT_PROMPTS
    if args.questions:
        from draftscope.bench.spec import load_questions

        texts = [q["turns"][0] for q in load_questions(args.questions, 10**6, set())]
    texts = [texts[i % len(texts)] for i in range(args.prompts)]
    return [engine.encode_chat([{"role": "user", "content": t}]) for t in texts]


def draft_model_from(spec: str | None, engine, *, device=None, dtype=None):
    """None, 'self', 'self:N' (the target's first N layers) or a model spec."""
    from draftscope.drafters.draft_model import load_draft_model
    from draftscope.engine.backends.pytorch.loader import truncated_model

    if not spec:
        return None
    if engine.model is None and spec.startswith("self"):
        if spec != "self":
            raise ValueError(
                f"--draft-model {spec}: the first N layers of a model are a torch draft model; "
                "on llama.cpp give 'self' or a GGUF draft model"
            )
        from draftscope.engine.backends import open_backend

        # the same GGUF in a second llama.cpp context (the weights are mapped once)
        return open_backend(
            engine.backend.source, backend="llama.cpp", context=engine.max_context, threads=engine.backend.threads
        )
    if spec == "self":
        return engine.model
    if spec.startswith("self:"):
        try:
            layers = int(spec[5:])
        except ValueError:
            raise ValueError(f"--draft-model {spec}: give the number of layers, e.g. self:8") from None
        return truncated_model(engine.model, layers)
    return load_draft_model(spec, engine, device=device, dtype=dtype).model


class Audit(NamedTuple):
    engine: object
    configs: list[list[str]]  # the drafter sets audited
    makers: dict  # their names -> a maker of fresh drafters
    prompts: list[list[int]]


def load_audit(args) -> Audit:
    """The model, the drafter sets it is audited with, and the prompts; named on stderr."""
    import torch

    from draftscope.core.drafter_factory import drafter_maker
    from draftscope.datastore.default import default_datastore_path
    from draftscope.drafters.recurrent.heads import find_recurrent
    from draftscope.engine.engine import Engine
    from draftscope.retrieval import Reader

    datastore = Path(args.datastore) if args.datastore else default_datastore_path(args.model)
    engine = Engine.load(
        args.model, device=args.device, dtype=args.dtype, backend=args.backend, measure=args.budget is None
    )
    draft_model = draft_model_from(args.draft_model, engine, device=args.device, dtype=args.dtype)
    recurrent = find_recurrent(args.model, engine, args.head)
    available = (
        (["retrieval"] if datastore.is_file() else [])
        + ["context"]
        + (["model"] if draft_model is not None else [])
        + (["recurrent"] if recurrent is not None else [])
    )
    configs = _configs(args.configs, available)
    reader = Reader(datastore) if "retrieval" in available else None  # read once, shared by every configuration
    makers = {
        ",".join(c): drafter_maker(
            c,
            datastore=reader,
            draft_model=draft_model,
            eos_token_id=engine.tokenizer.eos_token_id,
            recurrent=recurrent,
        )
        for c in configs
    }
    prompts = _prompts(args, engine)
    print(
        f"draftscope bench lossless: {engine.name} on {engine.backend.describe()}, "
        f"draft model {args.draft_model or 'none'}, "
        f"datastore {datastore.name if 'retrieval' in available else 'none'}, "
        f"recurrent head {recurrent.path if recurrent is not None else 'none'}",
        file=sys.stderr,
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}",
        file=sys.stderr,
    )
    return Audit(engine, configs, makers, prompts)
