"""The batch curve: what one forward of B tokens costs on this machine, and the ceiling it sets for
speculation. A fully accepted draft of B - 1 tokens writes B tokens in one forward of t(B) seconds:
B / t(B) tokens/s, B * t(1) / t(B) times plain decoding; the ceiling is the best of these over the
sizes the backend takes. ``bench spec`` prints two such curves side by side: llama-bench's (llama.cpp's
own forward of B tokens, the last row's logits only) and the engine's (``engine.verify_costs``: a
verify of a root and n draft nodes, every row's logits: the curve the step policy decides with)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CURVE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
LARGEST = 128  # a longer draft is rarely accepted whole, and llama-bench's run grows with it
CURVE_DEPTH = 256  # tokens already in the context, as when an answer is under way (the engine's too)
CURVE_REPEATS = 3


@dataclass
class BatchCurve:
    """Milliseconds for one forward by the tokens in it, and where they were measured."""

    ms: dict[int, float]
    source: str  # "llama-bench, 2 threads", "ours at load", ...
    llama_bench: bool = False  # llama.cpp's own forwards (the ceiling's measure), not the engine's verifies
    seconds: float | None = None  # what measuring it took (llama-bench's run)

    def rate(self, tokens: int) -> float:
        """Tokens/s a fully accepted forward of ``tokens`` tokens writes."""
        return tokens / (self.ms[tokens] / 1000)

    def over_plain(self, tokens: int) -> float | None:
        """That rate over one token a forward (None where a one-token forward was not measured)."""
        return self.rate(tokens) / self.rate(1) if 1 in self.ms else None

    def ceiling(self) -> tuple[int, float]:
        """(B, tokens/s): the forward size that writes fastest when every token is accepted."""
        best = max(self.ms, key=self.rate)
        return best, self.rate(best)


def engine_curve(costs: dict[int, float] | None, source: str) -> BatchCurve | None:
    """The engine's verify costs (seconds by draft nodes n: a forward of the root and n nodes) as a
    curve by the tokens in the forward, n + 1."""
    if not costs:
        return None
    return BatchCurve({n + 1: seconds * 1000 for n, seconds in sorted(costs.items())}, source)


def curve_sizes(max_tree: int | None) -> tuple[int, ...]:
    """The forward sizes worth measuring: up to the largest the backend verifies (a root and
    ``max_tree`` nodes; None: no limit), at most LARGEST."""
    largest = LARGEST if max_tree is None else min(LARGEST, max_tree + 1)
    return tuple(s for s in CURVE_SIZES if s <= largest)


def backend_curve(backend) -> BatchCurve | str:
    """llama-bench's curve for a llama.cpp backend's GGUF and threads, up to the largest forward it
    verifies, or why there is none."""
    from draftscope.bench.llama_server import find_llama_bench

    bench, why = find_llama_bench()
    if bench is None:
        return why
    return llama_bench_curve(bench, Path(backend.path), backend.threads, curve_sizes(backend.max_tree))


def llama_bench_curve(bench: Path, model: Path, threads: int, sizes, timeout: float = 600.0) -> BatchCurve | str:
    """llama-bench's time for a forward of each size on a context of CURVE_DEPTH (its depth is read
    once and restored, not timed), or why there is none."""
    command = [str(bench), "-m", str(model), "-t", str(threads), "-p", ",".join(map(str, sizes)), "-n", "0"]
    command += ["-d", str(CURVE_DEPTH), "-r", str(CURVE_REPEATS), "-o", "jsonl"]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"llama-bench failed ({exc})"
    ms = parse_llama_bench(done.stdout)
    if 1 not in ms:
        return f"llama-bench said nothing usable (exit {done.returncode})"
    source = f"llama-bench, {threads} thread{'' if threads == 1 else 's'}"
    return BatchCurve(ms, source, llama_bench=True, seconds=time.perf_counter() - t0)


def parse_llama_bench(jsonl: str) -> dict[int, float]:
    """Milliseconds by prompt size from llama-bench's ``-o jsonl`` lines (others skipped)."""
    ms = {}
    for line in jsonl.splitlines():
        try:
            row = json.loads(line)
            ms[int(row["n_prompt"])] = row["avg_ns"] / 1e6
        except (ValueError, KeyError, TypeError):
            continue
    return dict(sorted(ms.items()))


def describe(curve: BatchCurve) -> str:
    """The curve in one line, with its ceiling."""
    words = ", ".join(f"{n}: {ms:.1f} ms ({ms / curve.ms[1]:.2f}x)" for n, ms in curve.ms.items())
    size, rate = curve.ceiling()
    took = f", measured in {curve.seconds:.0f} s" if curve.seconds is not None else ""
    return (
        f"verify curve ({curve.source}, a forward of N tokens on {CURVE_DEPTH} in the context{took}): {words}; "
        f"ceiling: a fully accepted {size}-token forward writes {rate:.1f} tokens/s, "
        f"{curve.over_plain(size):.2f}x plain"
    )


def ceiling_curve(curves: list[BatchCurve]) -> BatchCurve | None:
    """The curve the ceiling is read from: llama-bench's where measured, else the engine's first."""
    return next((c for c in curves if c.llama_bench), curves[0] if curves else None)


def curve_table(curves: list[BatchCurve]) -> str:
    """The curves side by side by the tokens in a forward: ms, the tokens/s a fully accepted
    forward writes, and that over plain."""
    sizes = sorted({n for c in curves for n in c.ms})
    lines = [
        "verify curves: a forward of N tokens (a root and N - 1 draft tokens): ms, the tokens/s it writes "
        "when every draft token is accepted, and that over one token a forward",
        "",
        "| tokens | " + " | ".join(c.source for c in curves) + " |",
        "|---:|" + "---|" * len(curves),
    ]
    for n in sizes:
        cells = [_cell(c, n) for c in curves]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    ceilings = [f"{c.ceiling()[1]:.1f}/s at {c.ceiling()[0]}" for c in curves]
    lines.append("| ceiling | " + " | ".join(ceilings) + " |")
    return "\n".join(lines)


def _cell(curve: BatchCurve, n: int) -> str:
    if n not in curve.ms:
        return "–"
    over = curve.over_plain(n)
    return f"{curve.ms[n]:.1f} ms, {curve.rate(n):.1f}/s" + (f" ({over:.2f}x)" if over is not None else "")
