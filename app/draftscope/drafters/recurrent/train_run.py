"""A recurrent head's training run itself, in torch: the draft vocabulary, the seeded head and its
optimiser, the steps and their learning rate schedule, validation, checkpoints and the head written
at the end. recurrent/train.py reads the data and starts it (once torch is known to be there)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from draftscope.drafters.recurrent.files import save_head, target_identity
from draftscope.drafters.recurrent.head import RecurrentHead
from draftscope.drafters.recurrent.head_loss import head_losses, target_outputs, validate
from draftscope.drafters.recurrent.target import TorchTarget
from draftscope.drafters.recurrent.train_options import (
    TrainCancelled,
    TrainError,
    TrainOptions,
    TrainProgress,
    TrainReport,
)


def draft_vocabulary(sequences: np.ndarray, size: int, target_vocab: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """The ``size`` most frequent tokens of the training data (ties by id), the end tokens always in."""
    counts = np.bincount(sequences.ravel(), minlength=target_vocab)[:target_vocab].astype(np.float64)
    for t in always:
        if 0 <= t < target_vocab:
            counts[t] = np.inf
    size = min(size, target_vocab)
    order = np.lexsort((np.arange(target_vocab), -counts))[:size]
    return torch.from_numpy(np.sort(order))


def _lr(step: int, steps: int, peak: float) -> float:
    warmup = max(1, steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class _TrainingData(NamedTuple):
    train: np.ndarray  # sequences trained on
    val: np.ndarray  # sequences held out for validation
    vocab_ids: torch.Tensor  # the draft vocabulary


class Run:
    """One training run: the data, the head and its optimiser, and where the run is (step, time
    spent, validation curve), which a checkpoint keeps."""

    def __init__(
        self,
        target,
        options: TrainOptions,
        ckpt: Path,
        report: Callable[[TrainProgress], None],
        cancel,  # datastore.progress.CancelToken: .cancelled
        log: Callable[[str], None],
    ) -> None:
        self.target, self.options, self.ckpt, self.report, self.cancel, self.log = (
            target,
            options,
            ckpt,
            report,
            cancel,
            log,
        )
        self.device = target.device
        self.steps = options.steps
        self.per_step = options.batch * options.seq_len  # training positions a step sees
        self.step, self.seconds, self.curve = 0, 0.0, []
        self.latest: dict | None = None  # the latest validation figures
        self.loss: float | None = None

    def read(self, sequences_of: Callable[[int], np.ndarray], eos: tuple[int, ...]) -> _TrainingData:
        """The sequences (``sequences_of(count)``: recurrent/train.py reads the sources), shuffled
        by the seed into training and held-out ones, and the draft vocabulary of the training ones."""
        options = self.options
        self.report(TrainProgress("reading", 0, self.steps, 0, 0.0, None, None))
        self.log(f"reading {', '.join(options.data)} ...")
        sequences = sequences_of(self.steps * options.batch + options.val_sequences)
        if self.cancel.cancelled:
            raise TrainCancelled(self.ckpt)
        order = np.random.default_rng(options.seed).permutation(len(sequences))
        n_val = min(options.val_sequences, max(1, len(sequences) // 10))
        val, train = sequences[order[:n_val]], sequences[order[n_val:]]
        if len(train) == 0:
            raise TrainError(
                f"the training data gives only {len(sequences)} sequence(s) of {options.seq_len} tokens: "
                "all of them are held out for validation (give more data or a shorter --seq-len)"
            )
        vocab_ids = draft_vocabulary(train, options.draft_vocab, self.target.vocab, eos)
        self.log(
            f"{len(train)} training sequences of {options.seq_len} tokens, {n_val} held out; "
            f"draft vocabulary: {len(vocab_ids):,} tokens"
        )
        return _TrainingData(train, val, vocab_ids)

    def start(self, data: _TrainingData, resume: bool) -> None:
        """A seeded new head and its optimiser, or those of the checkpoint when resuming."""
        self.data = data
        torch.manual_seed(self.options.seed)
        self.head = RecurrentHead.for_target(self.target, data.vocab_ids, layers=self.options.layers).to(self.device)
        self.lm_rows = self.target.output_rows(data.vocab_ids).to(self.device)
        self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=self.options.lr, weight_decay=0.0)
        if resume and self.ckpt.exists():
            state = _load_checkpoint(self.ckpt, self.options)
            self.head.load_state_dict(state["head"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step, self.seconds, self.curve = state["step"], state["seconds"], state["curve"]
            self.log(f"resuming at step {self.step} of {self.steps}")
        elif self.ckpt.exists():
            self.ckpt.unlink()
        self.latest = self.curve[-1] if self.curve else None

    def train(self) -> None:
        """Steps until the last, validating now and then and saving a checkpoint every
        checkpoint_every steps (and when cancelled, which stops the run)."""
        steps = self.steps
        val_every = self.options.val_every or max(1, steps // 10)
        self.run_started = time.perf_counter()
        step_at_start = self.step
        while self.step < steps:
            if self.cancel.cancelled:
                self.save_checkpoint()
                raise TrainCancelled(self.ckpt)
            self.loss = self.train_step()
            self.step += 1
            done_seconds = time.perf_counter() - self.run_started
            rate = (self.step - step_at_start) * self.per_step / done_seconds if done_seconds > 0 else 0.0
            eta = (steps - self.step) * self.per_step / rate if rate > 0 else None
            if self.step % val_every == 0 or self.step == steps:
                self.validate(rate, eta)
            if self.step % self.options.checkpoint_every == 0 and self.step < steps:
                self.save_checkpoint()
            self.report(
                TrainProgress(
                    "training", self.step, steps, self.step * self.per_step, rate, eta, self.loss, self.latest
                )
            )

    def train_step(self) -> float:
        """One optimiser step on batch ``self.step`` at the schedule's learning rate; its loss."""
        batch = _batch(self.data.train, self.step, self.options.batch, self.options.seed)
        ids = torch.from_numpy(batch).to(self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = _lr(self.step, self.steps, self.options.lr)
        self.head.train()
        losses, _ = head_losses(self.head, *target_outputs(self.target, ids, self.lm_rows)[:3], self.options.length)
        total = sum(losses) / len(losses)
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(self.head.parameters(), 1.0)
        self.optimizer.step()
        self.head.eval()
        return float(total.detach())

    def validate(self, rate: float, eta: float | None) -> None:
        tokens = self.step * self.per_step
        self.report(TrainProgress("validating", self.step, self.steps, tokens, rate, eta, self.loss, self.latest))
        figures = validate(self.head, self.target, self.data.val, self.options.length, self.lm_rows, self.device)
        self.latest = {"tokens": tokens, "step": self.step, **figures}
        self.curve.append(self.latest)
        self.log(
            f"step {self.step}/{self.steps}: validation τ {figures['tau_chain']:.2f} (greedy chain), top-1 by "
            f"depth {', '.join(f'{x:.2f}' for x in figures['top1_by_depth'])}"
        )

    def save_checkpoint(self) -> None:
        _save_checkpoint(
            self.ckpt,
            self.options,
            self.head,
            self.optimizer,
            self.step,
            self.seconds + time.perf_counter() - self.run_started,
            self.curve,
        )

    def finish(self, out: Path, model_name: str) -> TrainReport:
        """The head written with the record of its training; the checkpoint removed."""
        self.seconds += time.perf_counter() - self.run_started
        seconds, tokens = self.seconds, self.steps * self.per_step
        save_head(self.head, out, target=target_identity(self.target, model_name), training=self.record(tokens))
        self.ckpt.unlink(missing_ok=True)
        rate = tokens / seconds if seconds else 0.0
        self.report(TrainProgress("done", self.steps, self.steps, tokens, rate, 0.0, self.loss, self.latest))
        return TrainReport(
            out, self.steps, tokens, seconds, rate, self.latest or {}, self.curve, self.head.parameter_count()
        )

    def record(self, tokens: int) -> dict:
        """What the head's JSON says of its training."""
        return {
            "data": self.options.data,
            "options": asdict(self.options),
            "steps": self.steps,
            "tokens": tokens,
            "seconds": round(self.seconds, 1),
            "tokens_per_second": round(tokens / self.seconds, 1) if self.seconds > 0 else None,
            "device": str(self.device),
            "dtype": self.target.dtype,
            "backend": "torch" if isinstance(self.target, TorchTarget) else "llama.cpp",
            "validation": self.latest,
            "curve": self.curve,
        }


def _batch(train: np.ndarray, step: int, size: int, seed: int) -> np.ndarray:
    """Batch ``step``: epochs walk a fresh seeded permutation of the sequences (wrapping as needed)."""
    n = len(train)
    picks = []
    for i in range(step * size, (step + 1) * size):
        epoch, pos = divmod(i, n)
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        picks.append(perm[pos])
    return train[picks]


def _save_checkpoint(path: Path, options: TrainOptions, head, optimizer, step: int, seconds: float, curve) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {
            "options": options.fingerprint(),
            "head": head.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "seconds": seconds,
            "curve": curve,
        },
        tmp,
    )
    os.replace(tmp, path)


def _load_checkpoint(path: Path, options: TrainOptions) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unreadable checkpoint gets the same advice
        raise TrainError(
            f"{path}: the checkpoint cannot be read ({type(exc).__name__}); delete it to start over"
        ) from None
    if not isinstance(state, dict) or state.get("options") != options.fingerprint():
        raise TrainError(
            f"{path} is a checkpoint of a run with other options (data, sizes or seed): resume with the "
            "same options, or start over without --resume"
        )
    return state
