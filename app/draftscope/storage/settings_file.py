"""The settings as a versioned JSON file in the platform's config folder, one object per section.

Loading never fails: a missing file gives the defaults; an unreadable, foreign or newer file gives
the defaults plus a notice (the old file kept beside as ``settings.json.bad``); a setting with a
wrong type or value falls back to its default with a notice naming it. Version 1 (every setting at
the top level, as Draftscope wrote it before sections) is read as it was and written back in
sections the next time the settings are saved. Versions 1 and 2 were written when answers were
greedy and cut at 512 tokens by default: a file whose sampling was never changed from those defaults
takes today's (sampling that does not loop, answers that run until the model stops). An MCP server
that is not one (or a second of a name) is left out by name, the user's other servers kept.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import fields
from pathlib import Path

from draftscope import paths
from draftscope.storage.import_check import shown
from draftscope.storage.presets import MAX_PRESETS, preset_problem
from draftscope.storage.settings import MAX_SERVERS, MAX_SYSTEM_PROMPT, Section, Settings, server_problem
from draftscope.toolbox.servers import McpServer

SETTINGS_VERSION = 3
FLAT_VERSION = 1  # every setting at the top level (before sections)
GREEDY_DEFAULTS_VERSION = 2  # sections, with greedy 512-token answers by default
# the sampling defaults of versions 1 and 2: a file holding all of them never chose them
OLD_SAMPLING_DEFAULTS = {
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": 0,
    "repetition_penalty": 1.0,
    "max_new_tokens": 512,
}
MAX_FILE_BYTES = 1 << 20  # a settings file is a few hundred bytes; anything this big is not one


def settings_path() -> Path:
    return paths.settings_file()


def load_settings(path: Path | None = None) -> tuple[Settings, list[str]]:
    """(settings, notices for the user). Never raises for a bad file."""
    path = path or settings_path()
    try:
        if not path.exists():
            return Settings(), []
        data = _read_object(path)
    except RecursionError:
        return Settings(), [_set_aside(path, "the settings file could not be read (nested too deeply)")]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return Settings(), [_set_aside(path, f"the settings file could not be read ({exc})")]
    version = data.get("version")
    if version == FLAT_VERSION:
        return settings_from_values(_without_old_defaults(data))
    if version == GREEDY_DEFAULTS_VERSION:
        return settings_from_values(_without_old_defaults(_flatten(data)))
    if version != SETTINGS_VERSION:
        why = f"the settings file has version {shown(version)}, this Draftscope writes version {SETTINGS_VERSION}"
        return Settings(), [_set_aside(path, why)]
    return settings_from_values(_flatten(data))


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Written aside and renamed; private to the user (0600 in a 0700 folder)."""
    path = path or settings_path()
    paths.private_folder(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(settings_document(settings), indent=2) + "\n")
    tmp.replace(path)
    return path


def settings_document(settings: Settings) -> dict:
    """What the file holds: the version, then each section's settings under its name."""
    return {
        "version": SETTINGS_VERSION,
        **{section.key: {name: getattr(settings, name) for name in section.names} for section in Section},
    }


def settings_from_values(data: dict) -> tuple[Settings, list[str]]:
    """Settings from ``name -> value`` (other keys ignored), each value checked: one of the wrong
    type or out of range is left at its default, with a notice naming it."""
    defaults, values, notices = Settings(), {}, []
    for f in fields(Settings):
        if f.name not in data:
            continue
        value, default = data[f.name], getattr(defaults, f.name)
        if not _same_kind(value, default):
            notices.append(f"setting {f.name!r} had an invalid value {shown(value)}; using the default")
            continue
        if f.name == "drafters":
            value = _switches(value, default, notices)
        elif f.name == "prompt_presets":
            value = _presets(value, notices)
        elif f.name == "mcp_servers":
            value = _servers(value, notices)
        values[f.name] = float(value) if isinstance(default, float) else value
    settings = Settings(**values)
    for why in settings.problems():
        name = why.split()[0]
        setattr(settings, name, getattr(defaults, name))
        notices.append(f"setting {name!r} was out of range ({why}); using the default")
    return settings, notices


def _without_old_defaults(values: dict) -> dict:
    """An older file's settings, its sampling dropped (so today's defaults apply) when every
    sampling value is still the old default: greedy answers cut at 512 tokens looped."""
    if any(values.get(name, old) != old for name, old in OLD_SAMPLING_DEFAULTS.items()):
        return values  # the user chose their sampling: theirs stays
    return {name: value for name, value in values.items() if name not in OLD_SAMPLING_DEFAULTS}


def _read_object(path: Path) -> dict:
    if not path.is_file():
        raise ValueError("not a regular file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path.stat().st_size:,} bytes: too large for a settings file")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _flatten(data: dict) -> dict:
    """The sections' settings as ``name -> value``: a setting is read from its own section only,
    and a section that is not an object is left out (its settings keep their defaults)."""
    flat = {}
    for section in Section:
        values = data.get(section.key)
        if isinstance(values, dict):
            flat.update({name: values[name] for name in section.names if name in values})
    return flat


def _switches(value: dict, default: dict, notices: list[str]) -> dict[str, bool]:
    """The drafters' switches: each one not true or false falls back to its default."""
    for k, v in value.items():
        if k in default and not isinstance(v, bool):
            notices.append(
                f"setting 'drafters.{k}' had an invalid value {shown(v)} (true or false); "
                f"using the default ({'on' if default[k] else 'off'})"
            )
    return {k: v for k, v in value.items() if k in default and isinstance(v, bool)} | {
        k: v for k, v in default.items() if k not in value or not isinstance(value[k], bool)
    }


def _presets(value: dict, notices: list[str]) -> dict[str, str]:
    """The user's presets: one that breaks the rules is left out by name, the others kept."""
    kept = {}
    for name, text in value.items():
        why = preset_problem(name, text, max_text=MAX_SYSTEM_PROMPT)
        if why is None and len(kept) < MAX_PRESETS:
            kept[name] = text
        else:
            notices.append(f"system-prompt preset {shown(name)} was left out ({why or f'more than {MAX_PRESETS}'})")
    return kept


def _servers(value: list, notices: list[str]) -> list[dict]:
    """The MCP servers: one that is not a server, or a second of the same name, is left out with a
    notice naming it; the others kept (one broken entry never costs the user every server)."""
    kept: list[dict] = []
    for entry in value:
        why = server_problem(entry)
        name = entry.get("name") if isinstance(entry, dict) else None
        if why is None and any(k["name"] == name for k in kept):
            why = "a server of that name comes before it"
        elif why is None and len(kept) >= MAX_SERVERS:
            why = f"more than {MAX_SERVERS} servers"
        if why is None:
            kept.append(McpServer.from_dict(entry).to_dict())  # keys it does not know are not carried on
        else:
            notices.append(f"MCP server {shown(name) if name is not None else shown(entry)} was left out ({why})")
    return kept


def _same_kind(value, default) -> bool:
    """Whether ``value`` can be the setting whose default is ``default``: its type, a whole number
    a float can hold for a decimal setting, and text (also in a list) that can be written back."""
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):  # a 401-digit integer is a number no float holds
        return isinstance(value, float) or (
            isinstance(value, int) and not isinstance(value, bool) and abs(value) <= sys.float_info.max
        )
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, str):
        return _is_text(value)
    if isinstance(default, list):
        return isinstance(value, list) and all(_is_text(v) for v in value if isinstance(v, str))
    return isinstance(value, type(default))


def _is_text(value) -> bool:
    """A str with no unpaired surrogate (one can name no file and cannot be saved as UTF-8)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _set_aside(path: Path, why: str) -> str:
    backup = path.with_name(path.name + ".bad")
    try:
        path.replace(backup)
        kept = f" (kept as {backup.name})"
    except OSError:
        kept = ""
    return f"{why}; defaults restored{kept}"
