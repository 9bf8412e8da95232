"""The user's settings, in sections that each know what a change to them means.

Every setting is one line in :class:`Settings`, declared in its :class:`Section` with
:func:`setting`; the section says what changing it does (:class:`Change`: load the model again,
rebuild the drafters, restart the server beside the window, restyle the window, or nothing until
the next answer reads it). :func:`change_between` is the one place that decides it for two
settings; the runtime refines it with what is loaded (core/runtime.py), and the window hears the
result as events (core/settings_change.py). Reading and writing the file: storage/settings_file.py.
"""

from __future__ import annotations

import enum
import json
from dataclasses import MISSING, dataclass, field, fields, replace

from draftscope.drafter_kinds import default_switches
from draftscope.engine.backends.llama.rpc import parse_workers
from draftscope.rules import (
    BACKENDS,
    DEFAULT_SAMPLING,
    DTYPES,
    GPU_LAYERS_AUTO,
    NO_SEED,
    RANGES,
    SEED_RANGE,
    UNTIL_STOP,
    context_problem,
    gpu_layers_problem,
    problem,
)
from draftscope.storage.import_check import shown
from draftscope.storage.presets import MAX_PRESETS, preset_problem
from draftscope.toolbox.servers import McpServer

MAX_SYSTEM_PROMPT = 100_000  # characters
MAX_TEXT = 4096  # characters of a path, model name or device
THEMES = ("system", "light", "dark")
MAX_PARALLEL = 16  # answers at once: each holds a cache as large as the context
MAX_RECENT = 6  # models the switcher remembers
MAX_THREADS = 256  # no machine this runs on has more cores; beyond is a typo
MAX_WINDOW_STATE = 64 * 1024  # characters of base64 window geometry or layout (Qt's are ~100-2,000)
MAX_KV_CACHE_MB = 1 << 20  # 1 TiB of conversations' caches on disk; beyond is a typo
MAX_SERVERS = 64  # MCP servers: each is a process or a connection the window keeps open
MAX_TOOL_CALLS = 100  # calls for one message of the user's; past it the model answers without more
MAX_TOOL_TIMEOUT_S = 3600.0  # an hour: a tool that takes longer is not one to wait on in a chat


class Change(enum.Flag):
    """What a changed setting asks of the running app (none: read again at the next answer)."""

    NONE = 0
    MODEL = enum.auto()  # the model is loaded again: a new runtime
    DRAFTERS = enum.auto()  # the drafters are built again over the same model
    SERVER = enum.auto()  # the server beside the window starts, restarts or stops
    LOOK = enum.auto()  # the window is restyled
    TOOLS = enum.auto()  # the window's MCP tool host starts again with the new servers


class Section(enum.Enum):
    """A group of settings, saved together, with what a change to any of them does."""

    MODEL = ("model", Change.MODEL)  # which model and how it runs
    DRAFTING = ("drafting", Change.DRAFTERS)  # what drafts come from
    SAMPLING = ("sampling", Change.NONE)  # how an answer is drawn: read at each answer
    SERVER = ("server", Change.SERVER)  # the OpenAI-compatible server beside the window
    APPEARANCE = ("appearance", Change.LOOK)
    REMEMBERED = ("remembered", Change.NONE)  # what the app remembers for the user (recent models)
    READING = ("reading", Change.NONE)  # reading before Send, and the caches kept on disk: read when next used
    TOOLS = ("tools", Change.TOOLS)  # the MCP servers whose tools the model may call, and the calls' limits

    def __init__(self, key: str, change: Change) -> None:
        self.key, self.change = key, change

    @property
    def names(self) -> tuple[str, ...]:
        """The settings in this section, in their declared order."""
        return tuple(f.name for f in fields(Settings) if f.metadata["section"] is self)


def setting(section: Section, default=MISSING, *, factory=MISSING):
    """A field of :class:`Settings` in ``section`` (``factory`` for a mutable default)."""
    return field(default=default, default_factory=factory, metadata={"section": section})


@dataclass
class Settings:
    model: str = setting(Section.MODEL, "default")
    draft_model: str = setting(Section.MODEL, "")  # the model drafter's small model (none: empty)
    device: str = setting(Section.MODEL, "auto")
    dtype: str = setting(Section.MODEL, "auto")  # auto: bf16 where the hardware has it natively, else fp32
    backend: str = setting(Section.MODEL, "auto")  # auto: llama.cpp for a GGUF file on the CPU, else torch
    workers: str = setting(Section.MODEL, "")  # llama.cpp RPC workers sharing the layers: "host:port, ..."
    threads: int = setting(Section.MODEL, 0)  # CPU threads the model computes on; 0: this computer's cores
    context_length: int = setting(Section.MODEL, 0)  # tokens read at once (rules.context_problem); 0: default
    gpu_layers: int = setting(Section.MODEL, GPU_LAYERS_AUTO)  # llama.cpp's layers on the card; -1: as many as fit
    datastore: str = setting(Section.DRAFTING, "")  # empty: the default chat datastore when it exists
    drafters: dict[str, bool] = setting(Section.DRAFTING, factory=default_switches)
    # sampling that does not loop (rules.DEFAULT_SAMPLING); the model's own recommendation replaces
    # what it sets while model_sampling is on (core/sampling_defaults.py)
    temperature: float = setting(Section.SAMPLING, DEFAULT_SAMPLING["temperature"])
    top_p: float = setting(Section.SAMPLING, DEFAULT_SAMPLING["top_p"])
    top_k: int = setting(Section.SAMPLING, DEFAULT_SAMPLING["top_k"])
    min_p: float = setting(Section.SAMPLING, DEFAULT_SAMPLING["min_p"])
    max_new_tokens: int = setting(Section.SAMPLING, UNTIL_STOP)  # 0: until the model stops, within the context
    repetition_penalty: float = setting(Section.SAMPLING, DEFAULT_SAMPLING["repetition_penalty"])
    repetition_window: int = setting(Section.SAMPLING, DEFAULT_SAMPLING["repetition_window"])
    model_sampling: bool = setting(Section.SAMPLING, True)  # use the model's recommended sampling where it has one
    stop_loops: bool = setting(Section.SAMPLING, True)  # end an answer that repeats itself (engine/loop_guard.py)
    seed: int = setting(Section.SAMPLING, -1)  # -1: a new seed for every answer; else every sampled answer's
    system_prompt: str = setting(Section.SAMPLING, "")
    prompt_presets: dict[str, str] = setting(Section.SAMPLING, factory=dict)  # the user's own (name -> text)
    server_enabled: bool = setting(Section.SERVER, False)
    server_port: int = setting(Section.SERVER, 8911)
    server_api_key: str = setting(Section.SERVER, "")  # empty: none (the server listens on this machine only)
    server_keep_history: bool = setting(Section.SERVER, True)  # served answers appear in the history
    server_parallel: int = setting(Section.SERVER, 1)  # served answers decoded at once (in shared forwards)
    theme: str = setting(Section.APPEARANCE, "system")
    font_size: int = setting(Section.APPEARANCE, 11)
    recent_models: list[str] = setting(Section.REMEMBERED, factory=list)  # loaded last, newest first
    window_geometry: str = setting(Section.REMEMBERED, "")  # Qt's saveGeometry, base64; empty: centred default
    window_layout: str = setting(Section.REMEMBERED, "")  # Qt's saveState (docks, toolbars), base64
    colour_drafts: bool = setting(Section.REMEMBERED, False)  # the transcript colours tokens by drafter
    last_conversation: int = setting(Section.REMEMBERED, 0)  # reopened at start; 0: none
    read_ahead: bool = setting(Section.READING, True)  # the window reads the prompt while the user types
    kv_cache_budget_mb: int = setting(Section.READING, 1024)  # conversations' caches on disk; 0: none kept
    # each an McpServer.to_dict() (toolbox/servers.py): its tools switched off and those run without asking
    mcp_servers: list[dict] = setting(Section.TOOLS, factory=list)
    tool_calls_per_answer: int = setting(Section.TOOLS, 10)  # calls the model makes for one message of the user's
    tool_timeout_s: float = setting(Section.TOOLS, 60.0)  # a call that runs longer ends as "timeout"

    def problems(self) -> list[str]:
        """Fields whose value is out of range (names and why)."""
        return [
            *_sampling_problems(self),
            *_text_problems(self),
            *_choice_problems(self),
            *_number_problems(self),
            *_tool_problems(self),
        ]


def section_of(name: str) -> Section:
    return next(f.metadata["section"] for f in fields(Settings) if f.name == name)


def changed_fields(old: Settings, new: Settings) -> set[str]:
    """Names of the settings whose values differ."""
    return {f.name for f in fields(Settings) if getattr(old, f.name) != getattr(new, f.name)}


def change_between(old: Settings, new: Settings) -> Change:
    """What going from ``old`` to ``new`` asks of the running app, as the changed settings' sections
    say (what is loaded can ask for more: Runtime.change_for)."""
    change = Change.NONE
    for name in changed_fields(old, new):
        change |= section_of(name).change
    return change


def answer_slots(settings: Settings) -> int:
    """Answers the model holds at once: the server's, plus the window's own while the server runs
    beside it (a window answer never waits for served ones)."""
    return settings.server_parallel + 1 if settings.server_enabled else 1


def tool_servers(settings: Settings) -> list[McpServer]:
    """The MCP servers the settings hold (checked on loading: each one is a server)."""
    return [McpServer.from_dict(d) for d in settings.mcp_servers]


def allow_always(settings: Settings, server: str, tool: str) -> Settings:
    """``settings`` with ``tool`` of ``server`` run without asking from now on ("always for this
    tool"); the same settings when the server is not among them or already allows it."""
    servers = tool_servers(settings)
    found = next((s for s in servers if s.name == server), None)
    if found is None or tool in found.always_allowed:
        return settings
    allowed = replace(found, always_allowed=(*found.always_allowed, tool))
    return replace(settings, mcp_servers=[(allowed if s is found else s).to_dict() for s in servers])


def server_problem(value) -> str | None:
    """Why ``value`` (one of ``mcp_servers``) is not a server that can be kept, in words; None: it is."""
    if not isinstance(value, dict):
        return f"{shown(value)} is not a server (a JSON object)"
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        problems = McpServer.from_dict(value).problems()
    except (TypeError, ValueError) as exc:  # also text with a broken character, which no file keeps
        return str(exc)
    return "; ".join(problems) or None


# ---------------------------------------------------------------------- the checks


def _sampling_problems(s: Settings) -> list[str]:
    out = [why for name in RANGES if (why := problem(name, getattr(s, name))) is not None]
    if s.seed != NO_SEED and not SEED_RANGE.holds(s.seed):
        out.append(f"seed must be {NO_SEED} (a new one for every answer) or {SEED_RANGE.words()}")
    if (why := context_problem(s.context_length)) is not None:
        out.append(why)
    if len(s.prompt_presets) > MAX_PRESETS:
        out.append(f"prompt_presets must be at most {MAX_PRESETS} presets")
    out += [
        f"prompt_presets refused: {why}"
        for name, text in s.prompt_presets.items()
        if (why := preset_problem(name, text, max_text=MAX_SYSTEM_PROMPT)) is not None
    ]
    return out


def _text_problems(s: Settings) -> list[str]:
    out = []
    if len(s.system_prompt) > MAX_SYSTEM_PROMPT:
        out.append(f"system_prompt must be at most {MAX_SYSTEM_PROMPT:,} characters")
    for name in ("model", "datastore", "draft_model", "device", "server_api_key"):
        if len(getattr(s, name)) > MAX_TEXT:
            out.append(f"{name} must be at most {MAX_TEXT:,} characters")
    try:
        parse_workers(s.workers)
    except ValueError as exc:
        out.append(f"workers must be host:port addresses: {exc}")
    if len(s.recent_models) > MAX_RECENT or not all(
        isinstance(m, str) and 0 < len(m) <= MAX_TEXT for m in s.recent_models
    ):
        out.append(f"recent_models must be at most {MAX_RECENT} model names")
    for name in ("window_geometry", "window_layout"):
        if len(getattr(s, name)) > MAX_WINDOW_STATE:
            out.append(f"{name} must be at most {MAX_WINDOW_STATE:,} characters")
    return out


def _choice_problems(s: Settings) -> list[str]:
    choices = {"dtype": DTYPES, "backend": BACKENDS, "theme": THEMES}
    return [
        f"{name} must be one of {', '.join(allowed)}"
        for name, allowed in choices.items()
        if getattr(s, name) not in allowed
    ]


def _number_problems(s: Settings) -> list[str]:
    out = []
    if not 0 <= s.threads <= MAX_THREADS:
        out.append(f"threads must be between 0 (automatic: all cores or one left free) and {MAX_THREADS}")
    if (why := gpu_layers_problem(s.gpu_layers)) is not None:
        out.append(why)
    if not 6 <= s.font_size <= 48:
        out.append("font_size must be between 6 and 48")
    if not 1 <= s.server_port <= 65535:
        out.append("server_port must be between 1 and 65535")
    if not 1 <= s.server_parallel <= MAX_PARALLEL:
        out.append(f"server_parallel must be between 1 and {MAX_PARALLEL}")
    if s.last_conversation < 0:
        out.append("last_conversation must be 0 (none) or a conversation's number")
    if not 0 <= s.kv_cache_budget_mb <= MAX_KV_CACHE_MB:
        out.append(f"kv_cache_budget_mb must be between 0 (no caches on disk) and {MAX_KV_CACHE_MB:,}")
    return out


def _tool_problems(s: Settings) -> list[str]:
    out = [f"mcp_servers refused a server: {why}" for d in s.mcp_servers if (why := server_problem(d)) is not None]
    if len(s.mcp_servers) > MAX_SERVERS:
        out.append(f"mcp_servers must be at most {MAX_SERVERS} servers")
    names = [d.get("name") for d in s.mcp_servers if isinstance(d, dict)]
    if twice := sorted({str(n) for n in names if names.count(n) > 1}):
        out.append(f"mcp_servers must name each server once ({', '.join(twice)} more than once)")
    if not 1 <= s.tool_calls_per_answer <= MAX_TOOL_CALLS:
        out.append(f"tool_calls_per_answer must be between 1 and {MAX_TOOL_CALLS}")
    if not 1 <= s.tool_timeout_s <= MAX_TOOL_TIMEOUT_S:
        out.append(f"tool_timeout_s must be between 1 and {MAX_TOOL_TIMEOUT_S:,.0f} seconds")
    return out
