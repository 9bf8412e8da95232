"""Things in words a user can act on, shared by the window, its dialogs and the commands (Qt-free):
sizes, memory, download status, errors from fetches and builds, catalogue notes."""

from __future__ import annotations

import errno
import math
import re
from pathlib import Path

from draftscope.models import assets, catalog
from draftscope.models.resolve import DEFAULT_MODEL, ModelNotFoundError


def size_text(n: int) -> str:
    """Bytes as a person reads a download's size: "98 MB", "1.12 GB"."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:,.0f} MB"


def memory_text(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def answer_stats(stats: dict, *, tau: str = "τ") -> str:
    """An answer's figures as stored with it (``session.answer_record``): "64 tokens · τ 2.10 ·
    18.2 tokens/s · first token 95 ms · 1.41x plain · seed 7" (``tau``: how τ is written; the
    terminal writes "tau", which any terminal shows and scripts grep for). A figure missing or not a
    number (an imported file's) is left out, never an error."""
    figures = (
        ("tokens", "{:.0f} tokens"),
        ("tau", tau + " {:.2f}"),
        ("tokens_per_second", "{:.1f} tokens/s"),
        ("time_to_first_token_ms", "first token {:.0f} ms"),
    )
    parts = [form.format(v) for key, form in figures if (v := _number(stats.get(key))) is not None]
    parts += prompt_read(stats)
    tau_value = _number(stats.get("tau"))
    speedup = _number(stats.get("speedup_estimate"))
    if speedup:
        parts.append(f"{speedup:.2f}x plain" if tau_value is None else speedup_words(speedup, tau_value))
    if stats.get("seed") is not None:  # sampled: this seed (Settings ▸ Generation) writes this answer again
        parts.append(f"seed {stats['seed']}")
    reason = stats.get("finish_reason")
    ended = STOPPED_WORDS.get(reason) if isinstance(reason, str) else None
    return " · ".join(([ended] if ended else []) + parts)


def _number(value) -> float | None:
    """A stored figure as a finite float; None for anything else (text, a bool, NaN, or an integer
    too large for a float, which a history written before imports were checked may hold)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


STALE_MARGIN = 1.1  # a speedup this far past τ says the plain figure is out of date


def speedup_stale(speedup: float | None, tau: float) -> bool:
    """Whether a speedup over plain decoding cannot be right: a step costs at least a plain step, so
    an answer cannot write faster than τ times plain; above that, the plain figure was measured on a
    busier moment (or on another machine's clocks)."""
    return speedup is not None and speedup > tau * STALE_MARGIN


def speedup_words(speedup: float, tau: float, *, times: str = "x") -> str:
    """A speedup as a user may trust it: "1.41x plain", or, when it cannot be right, at most τ and why."""
    if speedup_stale(speedup, tau):
        return f"≤{tau:.2f}{times} plain (the plain figure is out of date)"
    return f"{speedup:.2f}{times} plain"


def prompt_read(stats: dict) -> list[str]:
    """The prompt the first token waited for: ["prompt 1,480 tokens, 1,268 from cache"] (the cache
    of the turns before: only the rest was read); when some was there before Send, how: ["prompt
    3,240 tokens: 3,210 read ahead"], "2,900 restored from disk (0.04 s)", then the rest kept "from
    cache". None for answers stored before this was counted."""
    total, kept = _number(stats.get("prompt_tokens")), _number(stats.get("prompt_kept"))
    if total is None or kept is None:
        return []
    ahead = _number(stats.get("prompt_read_ahead")) or 0
    restored = _number(stats.get("prompt_restored")) or 0
    if not ahead and not restored:
        return [f"prompt {total:,.0f} tokens" + (f", {kept:,.0f} from cache" if kept else "")]
    parts = [f"{ahead:,.0f} read ahead"] if ahead else []
    if restored:
        seconds = _number(stats.get("restore_seconds"))
        parts.append(f"{restored:,.0f} restored from disk" + (f" ({seconds:.2f} s)" if seconds is not None else ""))
    if kept - ahead - restored > 0:
        parts.append(f"{kept - ahead - restored:,.0f} from cache")
    return [f"prompt {total:,.0f} tokens: " + ", ".join(parts)]


# How an answer that did not end by itself says so, first on its figures' line.
STOPPED_WORDS = {
    "cancel": "stopped",
    "length": "cut at the length limit",
    "loop": "stopped: the answer repeated itself",
    "error": "ended by an error",
}


def setting_name(model: catalog.CatalogModel) -> str:
    """What the settings store for a catalogue model ("default" for SmolLM2, as ever)."""
    return DEFAULT_MODEL if model is catalog.SMOLLM2_135M else model.name


def run_precision(device: str = "auto", dtype: str = "auto"):
    """The engine's ``Precision`` for these settings (imports torch), or None when it cannot be
    told (a device that is not there)."""
    from draftscope.engine.backends.pytorch import precision
    from draftscope.engine.backends.pytorch.precision import pick_device

    try:
        return precision.choose(pick_device(device), dtype)
    except (RuntimeError, ValueError, AssertionError):  # e.g. "cuda" stored, no CUDA here
        return None


def part_status(text: str) -> str:
    """The fetcher's "Downloading part 3 of 22 (package-name3)" without the package's name."""
    return re.sub(r"^(Downloading part \d+ of \d+) \(.*\)$", r"\1", text)


def catalog_note(model: catalog.CatalogModel, dtype: str, backend: str = "torch") -> str:
    """Size, memory needed on ``backend`` (in ``dtype`` on torch), downloaded or not, what it is good for."""
    state = "downloaded" if model.fetched else "not downloaded yet"
    how = "llama.cpp" if backend == "llama.cpp" else dtype
    return (
        f"{size_text(model.size)} · needs about {memory_text(model.memory_needed(dtype, backend))} of memory "
        f"({how}) · {state}\n{sentence(model.good_for)}"
    )


def describe_error(exc: BaseException, folder: Path | None = None) -> str:
    """An exception from a fetch or a build, in words a user can act on."""
    if isinstance(exc, (assets.AssetFetchError, ModelNotFoundError)):
        return sentence(str(exc))
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        where = f" in {folder}" if folder else ""
        return f"Not enough free disk space{where}. Free some space and retry."
    if isinstance(exc, PermissionError):
        return sentence(f"no permission to write {exc.filename or folder or 'the file'}")
    return sentence(str(exc) or type(exc).__name__)


def sentence(text: str) -> str:
    text = text.strip()
    first = text.split(" ", 1)[0]
    if not any(c in first for c in "./\\"):  # a file's name keeps its case ("notes.gguf is not …")
        text = text[:1].upper() + text[1:]
    return text + ("" if text.endswith((".", "!", "?")) else ".")


def megabytes(n: int) -> str:
    """Bytes as megabytes for a progress line: "980.0"."""
    return f"{n / 1e6:,.1f}"


def eta_text(seconds: float) -> str:
    """Time left in words: "about 2 min left" ("" under a second)."""
    if seconds < 1:
        return ""
    if seconds < 90:
        return f"about {seconds:.0f} s left"
    return f"about {seconds / 60:.0f} min left"
