"""Things in words a user can act on, shared by the window, its dialogs and the commands (Qt-free):
sizes, memory, download status, errors from fetches and builds, catalogue notes."""

from __future__ import annotations

import errno
import math
import re
from pathlib import Path

from draftscope.models import assets, catalog
from draftscope.models.resolve import DEFAULT_MODEL, ModelNotFoundError
from draftscope.optional_torch import torch_available


def size_text(n: int) -> str:
    """Bytes as a person reads a download's size: "98 MB", "1.12 GB"."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:,.0f} MB"


def memory_text(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def answer_stats(stats: dict, *, tau: str = "τ") -> str:
    """An answer's figures as stored with it (``session.answer_record``): "64 tokens · τ 2.10 ·
    18.2 tokens/s · first token 95 ms · 1.41x plain · seed 7" (``tau``: how τ is written; the
    terminal writes "tau", which any terminal shows and scripts grep for). The tokens/s is the
    writing rate (``writing_rate``), the first token's wait apart. A figure missing or not a number
    (an imported file's) is left out, never an error."""
    parts = [
        form.format(v)
        for key, form in (("tokens", "{:.0f} tokens"), ("tau", tau + " {:.2f}"))
        if (v := _number(stats.get(key))) is not None
    ]
    if (rate := writing_rate(stats)) is not None:
        parts.append(rate_text(rate))
    if (first := _number(stats.get("time_to_first_token_ms"))) is not None:
        parts.append(f"first token {first:.0f} ms")
    parts += prompt_read(stats)
    speedup = speedup_words(
        _number(stats.get("speedup_estimate")), _number(stats.get("tau")), busy=stats.get("busy") is True
    )
    if speedup:
        parts.append(speedup)
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


NO_DRAFTS = "no drafts used"  # τ 1.00: every token was the model's own, so no speedup to speak of
NO_DRAFTS_STEPS = 4  # steps a live answer runs before τ 1.00 means no draft was used, not "none yet"
BUSY = "the computer was busy"  # plain steps ran far slower than measured: a speedup would mislead
BUSY_NOW = "the computer is busy: answers are slower"  # the status bar's hint while it lasts


def speedup_words(
    speedup: float | None, tau: float | None, *, busy: bool = False, times: str = "x", steps: int | None = None
) -> str | None:
    """A speedup as a user may trust it: "1.41x plain"; NO_DRAFTS when no draft was accepted (τ 1.00,
    whatever the timing said), BUSY when the computer was; at most τ and why when it cannot be
    right. None when there is nothing to say (no figure, τ unknown or above 1). ``steps``: the steps
    a live answer has run so far (None: it ended); before NO_DRAFTS_STEPS of them τ 1.00 says
    nothing yet (its first step is always the model's own token), so None."""
    if tau is not None and tau <= 1.0 + 1e-9:
        return NO_DRAFTS if steps is None or steps >= NO_DRAFTS_STEPS else None
    if busy:
        return BUSY
    if not speedup:
        return None
    if tau is not None and speedup_stale(speedup, tau):
        return f"≤{tau:.2f}{times} plain (the plain figure is out of date)"
    return f"{speedup:.2f}{times} plain"


def rate_text(tokens_per_second: float | None) -> str:
    """The one tokens/s as every face writes it: "18.2 tokens/s" ("– tokens/s" before it is known)."""
    return "– tokens/s" if tokens_per_second is None else f"{tokens_per_second:.1f} tokens/s"


def writing_rate(stats: dict) -> float | None:
    """The one tokens/s of a stored answer: the tokens after the first step over the time after the
    first token (``decode_tokens_per_second``). For answers stored before it was kept, the same
    from their totals (the first step taken as one token); None when it cannot be told."""
    rate = _number(stats.get("decode_tokens_per_second"))
    if rate is not None or "decode_tokens_per_second" in stats:
        return rate
    tokens, elapsed = _number(stats.get("tokens")), _number(stats.get("elapsed_s"))
    first = _number(stats.get("time_to_first_token_ms"))
    if tokens is None or elapsed is None or first is None or tokens < 2 or elapsed <= first / 1000:
        return None
    return (tokens - 1) / (elapsed - first / 1000)


def note_head(note: str) -> str:
    """A drafting note's short head ("drafting paused" of "drafting paused: …"), for the status bar."""
    return note.split(": ", 1)[0]


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
    told (a device that is not there, or no torch here: a GGUF on llama.cpp keeps its own)."""
    from draftscope.engine.backends.pytorch import precision  # noqa: PLC0415  # the engine's backends load with it

    if not torch_available():
        return None
    try:
        return precision.choose(precision.pick_device(device), dtype)
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
