"""Drafts from the recurrent head (ReDrafter): beam search from the target's own hidden state.

The engine hands the drafter the target's last-layer hidden state at the last accepted position
(``set_hidden``), taken from the verify forward it already ran, so drafting costs only the head:
a few small matrix products per depth, all beams at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters.interface import Drafter
from draftscope.drafters.recurrent.beams import beam_search, beams_to_tree, end_rows
from draftscope.drafters.recurrent.files import HeadError, load_head
from draftscope.drafters.recurrent.target import GgufTarget, TorchTarget, as_target
from draftscope.engine.backends.pytorch.cpu_linear import MIN_GAIN, _set_layout

DEFAULT_WIDTH = 4
DEFAULT_LENGTH = 4
WIDTHS = (1, 2, 4, 8)  # beam widths tried when tuning for a device
NEARLY_FREE = 1.25  # a wider beam is taken while a depth costs at most this much more than one beam


class RecurrentDrafter(Drafter):
    name = "recurrent"
    source = DraftSource.RECURRENT
    wants_hidden = True  # the engine passes the target's hidden state after each step

    def __init__(
        self, head, embed, *, width: int = DEFAULT_WIDTH, length: int = DEFAULT_LENGTH, eos_ids: Sequence[int] = ()
    ) -> None:
        if width < 1 or length < 1:
            raise ValueError(f"beam width and length must be >= 1, got {width} and {length}")
        self.head = head
        self.embed = embed  # the target's input embedding module
        self.width = width
        self.length = length
        self.eos_mask = end_rows(head, {int(e) for e in eos_ids})  # a beam that drafts an end token stops
        self.hidden: torch.Tensor | None = None

    def reset(self, context_ids: Sequence[int]) -> None:
        self.hidden = None

    def set_hidden(self, hidden) -> None:
        """The target's hidden state at the position before the current root (it predicted the root):
        a tensor from the torch backend, a NumPy row from llama.cpp's (the head runs on the CPU then)."""
        self.hidden = torch.as_tensor(hidden)

    def observe(self, accepted_ids: Sequence[int]) -> None:
        pass  # set_hidden carries everything the head needs

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0 or self.hidden is None or not context_ids:
            return DraftTree.empty()
        length = min(self.length, budget)
        width = min(self.width, budget)
        paths, scores = beam_search(
            self.head, self.hidden, self.embed, int(context_ids[-1]), width=width, length=length, eos_mask=self.eos_mask
        )
        return beams_to_tree(paths, scores, budget)


@dataclass
class RecurrentSetup:
    """A head loaded for a model: what the factory needs to make a RecurrentDrafter per answer."""

    head: object  # RecurrentHead, on the model's device
    embed: object  # the model's input embedding module
    eos_ids: tuple[int, ...] = ()
    path: Path | None = None
    meta: dict | None = None
    width: int = DEFAULT_WIDTH
    length: int = DEFAULT_LENGTH
    measured: dict | None = None  # seconds per beam-search depth by width (tune)
    layout: str = ""  # the head's linear layout on a CPU, in words (choose_layout)

    def drafter(self) -> RecurrentDrafter:
        return RecurrentDrafter(self.head, self.embed, width=self.width, length=self.length, eos_ids=self.eos_ids)

    @classmethod
    def for_engine(cls, path, engine) -> RecurrentSetup:
        """The head at ``path`` for a loaded engine (torch or llama.cpp), its layout and beam width
        tuned to this device."""
        setup = cls.load(path, target_for(engine), model_name=engine.name, eos_ids=sorted(engine.eos_ids))
        engine.share_cores()  # torch is loaded now: tuned at the threads it will draft with (one beside llama.cpp)
        setup.layout = setup.choose_layout()
        setup.tune()
        return setup

    def choose_layout(self) -> str:
        """On a CPU, the head's few-row products in the layout that is faster here (the model's
        own probe, engine/backends/pytorch/cpu_linear.py, decides the same for the target)."""
        linears = [m for m in self.head.modules() if type(m) is torch.nn.Linear]
        if self.head.vocab_ids.device.type != "cpu":
            return ""
        usual = min(self.level_seconds(4) for _ in range(2))
        _set_layout(linears, True)
        transposed = min(self.level_seconds(4) for _ in range(2))
        if usual < MIN_GAIN * transposed:
            _set_layout(linears, False)
            return f"usual layout (transposed measured {usual / transposed:.2f}x)"
        return f"transposed layout ({usual / transposed:.1f}x faster here)"

    def level_seconds(self, width: int, repeats: int = 5) -> float:
        """Measured time of one beam-search depth at ``width`` beams on the head's device."""
        hidden = torch.zeros(self.head.cfg.hidden, device=self.head.vocab_ids.device)
        root = int(self.head.vocab_ids[0])
        times = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            beam_search(self.head, hidden, self.embed, root, width=width, length=2)
            if hidden.is_cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / 2)
        return sorted(times[1:])[len(times[1:]) // 2]

    def tune(self) -> dict[int, float]:
        """The widest beam whose depth costs at most NEARLY_FREE times a single beam's here: more
        candidates for (almost) nothing. Which of them are verified is the step policy's choice
        (measured verify costs, calibrated acceptance), and whether the head drafts at all the
        slow-drafter gate's. Returns the measured seconds per depth by width."""
        measured = {w: self.level_seconds(w) for w in WIDTHS}
        self.width = max(w for w in WIDTHS if measured[w] <= NEARLY_FREE * measured[1])
        self.measured = measured
        return measured

    @classmethod
    def load(cls, path, model, *, model_name: str = "", eos_ids: Sequence[int] = ()) -> RecurrentSetup:
        """``model``: a transformers model or a target view (recurrent.target). Raises
        recurrent.files.HeadError (missing, damaged, or trained for another model)."""
        target = as_target(model)
        head, meta = load_head(path, target, model_name=model_name)
        trained = ((meta.get("training") or {}).get("options") or {}).get("length")
        return cls(
            head.to(target.device),
            target.embed,
            tuple(int(e) for e in eos_ids),
            Path(path),
            meta,
            length=int(trained) if trained else DEFAULT_LENGTH,
        )


def target_for(engine):
    """The target view of a loaded engine: its torch model, or its GGUF on llama.cpp. Raises
    HeadError where the backend gives no hidden states. (Without torch: heads.training_target.)"""
    backend = engine.backend
    if not backend.gives_hidden:
        raise HeadError(
            f"the head reads the model's hidden state: the {backend.kind} backend {backend.no_hidden_reason}"
        )
    if backend.model is not None:
        return TorchTarget(backend.model)
    return GgufTarget(backend, getattr(engine, "stepper", None))
