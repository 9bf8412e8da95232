"""Installing PyTorch from the window, without Qt: the pip command the window runs, and what pip's
output says as it goes (bytes downloaded against the plan's estimate, the step pip is at) and when
it fails (pip's own last lines, led by a sentence a user can act on). The dialog
(gui/dialogs/torch_install.py) runs the command in a QProcess and feeds its lines here."""

from __future__ import annotations

import importlib
import re
import sys
from collections import deque

from draftscope import optional_torch
from draftscope.models.assets import pip_has_raw_progress
from draftscope.optional_torch import InstallPlan

_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")  # pip >= 24.1's --progress-bar raw
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+)(?: \((.+)\))?\s*$")
_INSTALLING = re.compile(r"^Installing collected packages: (.+)$")
_TAIL = 40  # lines of pip's output kept to explain a failure
_SAID = 6  # of which at most this many are shown

# Why pip failed, in words, by what it printed (first match wins).
_CAUSES = (
    (
        re.compile(r"externally-managed-environment", re.IGNORECASE),
        "This Python is managed by the system, and pip will not install into it. Run Draftscope from a "
        "virtual environment (bash scripts/setup.sh makes one) and install PyTorch there.",
    ),
    (
        re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded", re.IGNORECASE),
        "There is not enough free disk space for PyTorch: free some space and try again.",
    ),
    (
        re.compile(
            r"connection error|Connection refused|Max retries exceeded|Failed to establish|Name or service not known"
            r"|Temporary failure in name resolution|ProxyError|timed out|SSLError|Network is unreachable",
            re.IGNORECASE,
        ),
        "pip could not reach the package index: check the network (or pip's proxy settings) and try again.",
    ),
    (
        re.compile(r"No matching distribution found|Could not find a version that satisfies"),
        "pip found no build of it for this Python ({python}) and this system on the package index.",
    ),
    (
        re.compile(r"Permission denied|\[Errno 13\]"),
        "pip may not write to this Python's packages ({prefix}): run Draftscope from a virtual environment "
        "you own, or install PyTorch there from a terminal.",
    ),
)


def install_arguments(plan: InstallPlan) -> list[str]:
    """``sys.executable``'s arguments: pip installs the plan, printing its downloads' progress as
    numbers where pip can (>= 24.1; older pips show the steps only)."""
    bar = "raw" if pip_has_raw_progress() else "off"
    return ["-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", bar, *plan.pip_args]


def build_words(plan: InstallPlan) -> str:
    """Which build of PyTorch the plan installs, and why, in words ("" for another plan)."""
    if optional_torch.CPU_INDEX in plan.pip_args:
        return "the CPU build (no NVIDIA card was found here)"
    if plan.pip_args == (optional_torch.REQUIREMENT,):
        return "the CUDA build, for the NVIDIA card found here"
    return ""


def usable_without_restart() -> bool:
    """Whether PyTorch, just installed, can be used by this process: found on the path (its caches
    of what is installed refreshed), and not already judged missing by transformers (which decides
    once, and keeps its answer)."""
    importlib.invalidate_caches()
    if not optional_torch.torch_available():
        return False
    judged = sys.modules.get("transformers.utils.import_utils")
    return judged is None or bool(judged.is_torch_available())


class PipOutput:
    """pip's lines, read as they come: ``done`` bytes of ``total`` (the plan's estimate, or more
    once pip has said more), the ``step`` pip is at in words, ``installing`` once the downloads are
    over, and ``failure()`` in words once it has failed."""

    def __init__(self, estimate: int) -> None:
        self.estimate = estimate
        self.step = ""
        self.installing = False
        self.downloaded_any = False
        self._finished = self._file_done = self._file_total = 0  # bytes: files done, the current file
        self._tail: deque[str] = deque(maxlen=_TAIL)

    @property
    def done(self) -> int:
        return self._finished + self._file_done

    @property
    def total(self) -> int:
        return max(self.estimate, self._finished + self._file_total)

    def feed(self, line: str) -> bool:
        """Read one line; True when what the window shows (bytes or step) changed."""
        line = line.rstrip()
        progress = _PROGRESS.match(line)
        if progress:
            self._file_done, self._file_total = int(progress[1]), int(progress[2])
            self.downloaded_any = True
            return True
        if line.strip():
            self._tail.append(line)
        downloading, installing = _DOWNLOADING.match(line), _INSTALLING.match(line)
        if downloading:  # a new file: the last one's bytes are counted as done
            self._finished += self._file_done
            self._file_done = self._file_total = 0
            size = f" ({downloading[2]})" if downloading[2] else ""
            self.step = f"Downloading {downloading[1]}{size}"
        elif installing:
            self.installing = True
            self.step = f"Installing {installing[1]} (this takes a while) …"
        elif line.startswith("Collecting "):
            self.step = f"Looking up {line.removeprefix('Collecting ').strip()} …"
        else:
            return False
        return True

    def said(self) -> str:
        """pip's own words on what went wrong: its ERROR lines, else its last lines."""
        errors = [line for line in self._tail if line.startswith("ERROR:")]
        return "\n".join((errors or list(self._tail))[-_SAID:])

    def failure(self, exit_code: int) -> str:
        """Why pip failed, in words, then what pip said."""
        text = "\n".join(self._tail)
        lead = next((words for pattern, words in _CAUSES if pattern.search(text)), None)
        if lead is None:
            lead = f"pip stopped (exit status {exit_code}) before PyTorch was installed."
        version = f"Python {sys.version_info.major}.{sys.version_info.minor}"
        lead = lead.format(python=version, prefix=sys.prefix)
        said = self.said()
        return f"{lead}\nNothing else changed: Draftscope runs as before." + (f"\n\npip said:\n{said}" if said else "")
