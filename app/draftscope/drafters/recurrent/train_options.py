"""A recurrent head's training run, as its callers see it: the options, the progress it reports,
the report it ends with, its errors and its checkpoint's place. No torch here: the window's training
dialog and ``draftscope drafter train`` build their forms and messages on a machine without it
(training itself asks for torch: recurrent/train.py)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


class TrainError(ValueError):
    """A problem with the options or the data the user has to fix (shown as is)."""


class TrainCancelled(Exception):
    def __init__(self, checkpoint: Path) -> None:
        super().__init__(f"training cancelled; a checkpoint is at {checkpoint} (run again with --resume to continue)")
        self.checkpoint = checkpoint


@dataclass
class TrainOptions:
    data: list[str]  # source specs: chat:, text:, jsonl:, code:, table: (datastore sources) or answers:
    tokens: int = 200_000  # training positions to see (batches x sequence length)
    seq_len: int = 256
    batch: int = 8  # sequences per step
    length: int = 4  # depths trained (the longest beam the head drafts well)
    draft_vocab: int = 8192
    layers: int = 2
    lr: float = 2e-3
    seed: int = 0
    val_sequences: int = 16
    val_every: int = 0  # steps between validations; 0: about ten times per run
    checkpoint_every: int = 25  # steps

    def validate(self) -> None:
        if not self.data:
            raise TrainError("no training data given (--data chat:FILE, text:PATH, jsonl:PATH or answers:FILE)")
        for name in ("tokens", "seq_len", "batch", "length", "draft_vocab", "val_sequences", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seq_len <= self.length + 1:
            raise TrainError(f"seq_len ({self.seq_len}) must be longer than length + 1 ({self.length + 1})")
        if not self.lr > 0:
            raise TrainError(f"the learning rate must be > 0, got {self.lr}")

    @property
    def steps(self) -> int:
        return max(1, math.ceil(self.tokens / (self.batch * self.seq_len)))

    def fingerprint(self) -> str:
        """What a checkpoint must match to be resumed (everything that shapes the result)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrainProgress:
    phase: str  # "reading", "training", "validating", "done"
    step: int
    steps: int
    tokens: int  # training positions seen
    tokens_per_second: float
    eta_seconds: float | None
    loss: float | None
    validation: dict | None = None  # the latest validation figures


@dataclass
class TrainReport:
    out: Path
    steps: int
    tokens: int
    seconds: float  # training time of all runs together (resumes included)
    tokens_per_second: float
    validation: dict
    curve: list[dict] = field(default_factory=list)  # validation by training tokens
    head_parameters: int = 0


def checkpoint_path(out: str | os.PathLike[str]) -> Path:
    return Path(out).with_suffix(".ckpt")
