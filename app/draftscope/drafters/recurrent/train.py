"""Training a recurrent head for a model: knowledge distillation from the target.

The corpus is packed into sequences; one forward of the (frozen) target per batch gives its
last hidden states h_t and its next-token distributions. For every position t the head, fed the
corpus tokens x_{t+1..t+L} (teacher forcing) and h_t, learns at depth k the *target's*
distribution after x_{<=t+k} (soft cross-entropy over the draft vocabulary), so it predicts what
the model would write, not what the corpus says.

Everything a run does follows from its options and seed (data order, initialisation, learning
rate schedule), and a checkpoint holds the rest (head, optimiser, step, figures), so a run that
was cancelled and resumed ends with the same head as one that never stopped. The head's loss
and validation figures on a batch: ``head_loss``.

This module reads the data and is the entry; the run itself, in torch, is ``train_run``, imported
once torch is known to be there (a head is a torch module: without torch, the words say so).
The options, progress and report types: ``train_options`` (re-exported here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from draftscope.datastore.chat_template import ChatRenderer
from draftscope.datastore.distill import load_answers
from draftscope.datastore.pipeline import batch_encoder
from draftscope.datastore.progress import CancelToken
from draftscope.datastore.records import Conversation, SkipLog
from draftscope.datastore.sources import DatastoreError, Source
from draftscope.drafters.recurrent.files import require_torch_for
from draftscope.drafters.recurrent.train_options import (
    TrainCancelled,
    TrainError,
    TrainOptions,
    TrainProgress,
    TrainReport,
    checkpoint_path,
)

__all__ = [
    "ANSWERS_KIND",
    "TrainCancelled",
    "TrainError",
    "TrainOptions",
    "TrainProgress",
    "TrainReport",
    "checkpoint_path",
    "read_sequences",
    "train_head",
]

ANSWERS_KIND = "answers"  # answers:PATH, distilled answers (datastore distill): the model's own text


# ------------------------------------------------------------------ data


def _render_texts(specs: list[str], tokenizer) -> Iterator[str]:
    renderer = ChatRenderer(tokenizer, "conversation")
    skips = SkipLog()
    for spec in specs:
        kind, _, path = spec.partition(":")
        if kind == ANSWERS_KIND:
            yield from _answer_texts(Path(path).expanduser(), tokenizer)
            continue
        try:
            source = Source.parse(spec)
            files = source.files()
        except DatastoreError as exc:
            raise TrainError(str(exc)) from None
        for item in source.iter_items(files, skips):
            if isinstance(item, Conversation):
                yield from renderer.render(item, skips)
            else:
                yield item.text


def _answer_texts(path: Path, tokenizer) -> Iterator[str]:
    if not path.is_file():
        raise TrainError(f"answers:{path}: no such file (datastore distill writes NAME.answers.jsonl)")
    for answer in load_answers(path).values():
        messages = [{"role": "user", "content": answer.prompt}, {"role": "assistant", "content": answer.answer}]
        if getattr(tokenizer, "chat_template", None):
            yield tokenizer.apply_chat_template(messages, tokenize=False)
        else:
            yield answer.prompt + "\n\n" + answer.answer


def read_sequences(
    specs: list[str], tokenizer, count: int, seq_len: int, cancel: CancelToken | None = None
) -> np.ndarray:
    """Up to ``count`` sequences of ``seq_len`` tokens: documents tokenised and packed end to end
    (an end-of-text token between them), in the order the sources give them."""
    encode = batch_encoder(tokenizer)
    sep = tokenizer.eos_token_id
    need = count * seq_len
    buf: list[int] = []
    batch: list[str] = []

    def flush() -> None:
        for ids in encode(batch):
            buf.extend(ids)
            if sep is not None:
                buf.append(int(sep))
        batch.clear()

    for text in _render_texts(specs, tokenizer):
        if cancel is not None and cancel.cancelled:
            break
        if text.strip():
            batch.append(text)
        if len(batch) >= 64:
            flush()
            if len(buf) >= need:
                break
    if batch and len(buf) < need:
        flush()
    n = min(count, len(buf) // seq_len)
    if n == 0:
        raise TrainError(f"the training data has {len(buf):,} tokens: not even one sequence of {seq_len}")
    return np.asarray(buf[: n * seq_len], dtype=np.int64).reshape(n, seq_len)


# ------------------------------------------------------------------ the run


def train_head(
    model,
    tokenizer,
    options: TrainOptions,
    out: str | os.PathLike[str],
    *,
    model_name: str = "",
    resume: bool = False,
    progress: Callable[[TrainProgress], None] | None = None,
    cancel: CancelToken | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> TrainReport:
    """Train a head for ``model`` (a transformers model, or a target view: recurrent.target, e.g. a
    GGUF on llama.cpp) and write it to ``out`` (.safetensors + .json).

    ``resume``: continue from ``out``'s checkpoint (options must match). Cancelling saves a
    checkpoint and raises TrainCancelled; without ``resume`` an existing checkpoint is replaced.
    Raises files.HeadNeedsTorch (a HeadError) where torch is not installed, before anything is read."""
    options.validate()
    require_torch_for("Training a recurrent head (draftscope drafter train)")
    from draftscope.drafters.recurrent.target import as_target  # noqa: PLC0415  # torch: asked for above
    from draftscope.drafters.recurrent.train_run import Run  # noqa: PLC0415  # torch: asked for above

    cancel = cancel or CancelToken()
    out = Path(out).expanduser().with_suffix(".safetensors")
    if not out.parent.exists():
        raise TrainError(f"output folder does not exist: {out.parent}")
    run = Run(as_target(model), options, checkpoint_path(out), progress or (lambda p: None), cancel, log)
    eos = tuple(sorted({int(t) for t in [tokenizer.eos_token_id] if t is not None}))
    data = run.read(lambda count: read_sequences(options.data, tokenizer, count, options.seq_len, cancel), eos)
    run.start(data, resume)
    run.train()
    return run.finish(out, model_name)
