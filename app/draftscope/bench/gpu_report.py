"""The output and timing every section of ``draftscope bench gpu`` shares: the section names, the
printed and JSON-lines report, the device-synchronised clock, one answer through the engine's own
loop, and the device's name. Apart from gpu.py so that the section modules (gpu_step_costs.py,
gpu_decoding.py) and the command itself import them without importing each other.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import NamedTuple

SECTIONS = {
    "verify": "verify cost curve",
    "worst": "worst step",
    "plain": "plain decoding vs HF generate",
    "peer": "llama.cpp's own programs",
    "oracle": "oracle limit",
    "spec-bench": "spec-bench",
}
WARMUP = 2  # untimed runs before each timed series


class Report:
    """Prints the figures and, with --json, writes each as one JSON line naming its section."""

    def __init__(self, path: str | None) -> None:
        self.file = open(path, "w", encoding="utf-8") if path else None

    def heading(self, key: str) -> None:
        number = list(SECTIONS).index(key) + 1
        print(f"\n== {number}. {SECTIONS[key]} ==", flush=True)

    def line(self, text: str) -> None:
        print(text, flush=True)

    def figures(self, key: str, text: str | None = None, **data) -> None:
        if text:
            self.line(text)
        if self.file:
            self.file.write(json.dumps({"section": SECTIONS.get(key, key), **data}) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()


# ----------------------------------------------------------------------------- timing


def device_type(device) -> str:
    """The kind of ``device``: a torch device's type ("cuda", "mps", "cpu"), or llama.cpp's device in
    words ("cpu", "cuda", "gpu", "cpu + workers")."""
    return getattr(device, "type", None) or str(device)


def sync(device) -> None:
    """Kernels run asynchronously on a GPU: wait for them before reading the clock. llama.cpp's
    decode returns once its logits are read back: a device in words needs no wait."""
    import torch

    if not hasattr(device, "type"):
        return
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed(fn, device, reps: int, warm: int = WARMUP) -> float:
    """Median milliseconds of ``fn`` over ``reps`` runs after ``warm`` untimed ones."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


class Answer(NamedTuple):
    """One answer through Engine.generate, the app's own loop."""

    tokens: list[int]
    seconds: float  # the whole answer, the prompt's reading included
    steps: int
    nodes: float  # mean nodes verified a step
    step_ms: float  # median ms of a step after the first (the first holds the prompt's reading)
    writing_tps: float | None  # tokens/s after the first step (the engine's own figure)


def answer(engine, prompt: list[int], tokens: int, drafters=(), budget: int | None = None) -> Answer:
    """One answer to ``prompt`` through Engine.generate, timed with the device synchronised."""
    from draftscope.engine.engine import GenerationRequest

    sync(engine.device)
    t0 = time.perf_counter()
    events = list(
        engine.generate(
            GenerationRequest(
                keep_cache=False, prompt_ids=prompt, max_new_tokens=tokens, drafters=list(drafters), budget=budget
            )
        )
    )
    sync(engine.device)
    seconds, final = time.perf_counter() - t0, events[-1]
    if final.finish_reason == "error":
        raise RuntimeError(final.error)
    steps = [ev for ev in events[:-1] if hasattr(ev, "proposed")]
    nodes = sum(ev.proposed for ev in steps) / len(steps) if steps else 0.0
    step_ms = statistics.median(ev.total_ms for ev in steps[1:]) if len(steps) > 1 else float("nan")
    return Answer(final.token_ids, seconds, final.stats.steps, nodes, step_ms, final.stats.decode_tokens_per_second)


def device_name(device) -> str:
    """The card's or the CPU's name; a llama.cpp backend's card as llama.cpp names it."""
    import torch

    from draftscope.bench.spec import _cpu_name

    kind = device_type(device)
    if kind == "cpu":
        return f"{_cpu_name()} ({os.cpu_count()} cores)"
    if not hasattr(device, "type"):  # llama.cpp's card: its own name for it, torch may see none
        from draftscope.engine.backends.llama.gpu_offload import cards

        found = cards()
        return found[0].description if found else kind
    if kind == "cuda":
        return torch.cuda.get_device_name(device)
    return kind
