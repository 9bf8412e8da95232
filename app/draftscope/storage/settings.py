"""User settings as a versioned JSON file in the platform's config folder.

Loading never fails: a missing file gives the defaults; an unreadable, foreign or newer file
gives the defaults plus a notice (and the old file is kept beside as ``settings.json.bad``); a
field with a wrong type or value falls back to its default with a notice naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from draftscope import paths
from draftscope.rules import (
    BACKENDS, DRAFTER_NAMES, DRAFTERS_ON, DTYPES, NO_SEED, RANGES, SEED_RANGE, context_problem, problem,
)
from draftscope.storage.presets import MAX_PRESETS, preset_problem

SETTINGS_VERSION = 1
MAX_FILE_BYTES = 1 << 20  # a settings file is a few hundred bytes; anything this big is not one
MAX_SYSTEM_PROMPT = 100_000  # characters
MAX_TEXT = 4096  # characters of a path, model name or device
THEMES = ("system", "light", "dark")


MAX_PARALLEL = 16  # answers at once: each holds a cache as large as the context

MAX_RECENT = 6  # models the switcher remembers
MAX_THREADS = 256  # no machine this runs on has more cores; beyond is a typo


@dataclass
class Settings:
    model: str = "default"
    datastore: str = ""  # empty: the default chat datastore when it exists
    drafters: dict[str, bool] = field(default_factory=lambda: {name: name in DRAFTERS_ON for name in DRAFTER_NAMES})
    draft_model: str = ""
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 512
    repetition_penalty: float = 1.0
    seed: int = -1  # -1: a new seed for every answer; else every sampled answer uses this one (reproducible)
    system_prompt: str = ""
    prompt_presets: dict[str, str] = field(default_factory=dict)  # the user's own system prompts (name -> text)
    context_length: int = 0  # tokens the model reads at once (rules.context_problem); 0: the model's default
    device: str = "auto"
    dtype: str = "auto"  # auto: bf16 where the hardware has it natively, else fp32 (engine.precision)
    backend: str = "auto"  # auto: llama.cpp for a GGUF file on the CPU, torch otherwise (engine.backends)
    workers: str = ""  # llama.cpp RPC workers sharing the model's layers: "host:port, host:port" (none: empty)
    recent_models: list[str] = field(default_factory=list)  # the models loaded last, newest first (the switcher)
    threads: int = 0  # CPU threads the model computes on; 0: this computer's cores (llama.cpp's, or torch's for a torch model)
    theme: str = "system"
    font_size: int = 11
    # The OpenAI-compatible server beside the window (Settings ▸ Server; `draftscope serve` alone).
    server_enabled: bool = False
    server_port: int = 8911
    server_api_key: str = ""  # empty: none (the server listens on this machine only)
    server_keep_history: bool = True  # served answers appear in the history as conversations
    server_parallel: int = 1  # served answers decoded at once (llama.cpp: in shared forwards)

    def problems(self) -> list[str]:
        """Fields whose value is out of range (names and why)."""
        out = [why for name in RANGES if (why := problem(name, getattr(self, name))) is not None]
        if self.seed != NO_SEED and not SEED_RANGE.holds(self.seed):
            out.append(f"seed must be {NO_SEED} (a new one for every answer) or {SEED_RANGE.words()}")
        if len(self.system_prompt) > MAX_SYSTEM_PROMPT:
            out.append(f"system_prompt must be at most {MAX_SYSTEM_PROMPT:,} characters")
        if (why := context_problem(self.context_length)) is not None:
            out.append(why)
        if len(self.prompt_presets) > MAX_PRESETS:
            out.append(f"prompt_presets must be at most {MAX_PRESETS} presets")
        out += [f"prompt_presets refused: {why}" for name, text in self.prompt_presets.items()
                if (why := preset_problem(name, text, max_text=MAX_SYSTEM_PROMPT)) is not None]
        for name in ("model", "datastore", "draft_model", "device"):
            if len(getattr(self, name)) > MAX_TEXT:
                out.append(f"{name} must be at most {MAX_TEXT:,} characters")
        try:
            from draftscope.engine.backends.llama.rpc import parse_workers

            parse_workers(self.workers)
        except ValueError as exc:
            out.append(f"workers must be host:port addresses: {exc}")
        if self.dtype not in DTYPES:
            out.append(f"dtype must be one of {', '.join(DTYPES)}")
        if self.backend not in BACKENDS:
            out.append(f"backend must be one of {', '.join(BACKENDS)}")
        if self.theme not in THEMES:
            out.append(f"theme must be one of {', '.join(THEMES)}")
        if len(self.recent_models) > MAX_RECENT or not all(isinstance(m, str) and 0 < len(m) <= MAX_TEXT
                                                           for m in self.recent_models):
            out.append(f"recent_models must be at most {MAX_RECENT} model names")
        if not 0 <= self.threads <= MAX_THREADS:
            out.append(f"threads must be between 0 (as many as this computer's cores) and {MAX_THREADS}")
        if not 6 <= self.font_size <= 48:
            out.append("font_size must be between 6 and 48")
        if not 1 <= self.server_port <= 65535:
            out.append("server_port must be between 1 and 65535")
        if not 1 <= self.server_parallel <= MAX_PARALLEL:
            out.append(f"server_parallel must be between 1 and {MAX_PARALLEL}")
        if len(self.server_api_key) > MAX_TEXT:
            out.append(f"server_api_key must be at most {MAX_TEXT:,} characters")
        return out


def answer_slots(settings: Settings) -> int:
    """Answers the model holds at once: the server's, plus the window's own while the server runs
    beside it (a window answer never waits for served ones)."""
    return settings.server_parallel + 1 if settings.server_enabled else 1


def settings_path() -> Path:
    return paths.settings_file()


def load_settings(path: Path | None = None) -> tuple[Settings, list[str]]:
    """(settings, notices for the user). Never raises for a bad file."""
    path = path or settings_path()
    if not path.exists():
        return Settings(), []
    try:
        if not path.is_file():
            raise ValueError("not a regular file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path.stat().st_size:,} bytes: too large for a settings file")
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except RecursionError:
        return Settings(), [_set_aside(path, "the settings file could not be read (nested too deeply)")]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return Settings(), [_set_aside(path, f"the settings file could not be read ({exc})")]
    version = data.get("version")
    if version != SETTINGS_VERSION:
        why = f"the settings file has version {version!r}, this Draftscope writes version {SETTINGS_VERSION}"
        return Settings(), [_set_aside(path, why)]
    defaults = Settings()
    values, notices = {}, []
    for f in fields(Settings):
        if f.name not in data:
            continue
        value, default = data[f.name], getattr(defaults, f.name)
        if not _same_kind(value, default):
            notices.append(f"setting {f.name!r} had an invalid value {value!r}; using the default")
            continue
        if f.name == "drafters":
            value = _switches(value, default, notices)
        elif f.name == "prompt_presets":
            value = _presets(value, notices)
        values[f.name] = float(value) if isinstance(default, float) else value
    settings = Settings(**values)
    for why in settings.problems():
        name = why.split()[0]
        setattr(settings, name, getattr(defaults, name))
        notices.append(f"setting {name!r} was out of range ({why}); using the default")
    return settings, notices


def _switches(value: dict, default: dict, notices: list[str]) -> dict[str, bool]:
    """The drafters' switches: each one not true or false falls back to its default."""
    for k, v in value.items():
        if k in default and not isinstance(v, bool):
            notices.append(f"setting 'drafters.{k}' had an invalid value {v!r} (true or false); "
                           f"using the default ({'on' if default[k] else 'off'})")
    return {k: v for k, v in value.items() if k in default and isinstance(v, bool)} | {
        k: v for k, v in default.items() if k not in value or not isinstance(value[k], bool)}


def _presets(value: dict, notices: list[str]) -> dict[str, str]:
    """The user's presets: one that breaks the rules is left out by name, the others kept."""
    kept = {}
    for name, text in value.items():
        why = preset_problem(name, text, max_text=MAX_SYSTEM_PROMPT)
        if why is None and len(kept) < MAX_PRESETS:
            kept[name] = text
        else:
            notices.append(f"system-prompt preset {name!r} was left out ({why or f'more than {MAX_PRESETS}'})")
    return kept


def _same_kind(value, default) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, type(default))


def _set_aside(path: Path, why: str) -> str:
    backup = path.with_name(path.name + ".bad")
    try:
        path.replace(backup)
        kept = f" (kept as {backup.name})"
    except OSError:
        kept = ""
    return f"{why}; defaults restored{kept}"


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Written aside and renamed; private to the user (0600 in a 0700 folder)."""
    from draftscope.paths import private_folder

    path = path or settings_path()
    private_folder(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps({"version": SETTINGS_VERSION, **asdict(settings)}, indent=2) + "\n")
    tmp.replace(path)
    return path
