"""The MCP servers' tools as the model sees them: OpenAI's `tools` shape, each under a name the chat
templates and OpenAI's rule accept (^[A-Za-z0-9_.-]{1,64}$), and the way back from that name to the
server and its tool. (Named tool_catalog.py: models/catalog.py has the plain name.)"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from draftscope.toolbox.tool_results import ToolInfo

NAME_RULE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_NAME = 64


def openai_tools(infos: Sequence[ToolInfo]) -> tuple[list[dict], dict[str, tuple[str, str]]]:
    """The tools in OpenAI's shape and the map openai name -> (server, tool). A tool keeps its own
    name when it is valid and no other server's tool has it; otherwise "<server>_<tool>", with the
    characters the rule refuses made "_" (and a number added when even that is taken)."""
    counts = Counter(info.name for info in infos)
    used: set[str] = set()
    tools: list[dict] = []
    route: dict[str, tuple[str, str]] = {}
    for info in infos:
        own = info.name if counts[info.name] == 1 and NAME_RULE.match(info.name) else ""
        name = _free(own or _clean(f"{info.server}_{info.name}"), used)
        used.add(name)
        route[name] = (info.server, info.name)
        tools.append(
            {
                "type": "function",
                "function": {"name": name, "description": info.description, "parameters": _parameters(info)},
            }
        )
    return tools, route


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:MAX_NAME] or "tool"


def _free(name: str, used: set[str]) -> str:
    """``name``, or ``name`` with a number, that no tool has yet."""
    if name not in used:
        return name
    n = 2
    while f"{name[: MAX_NAME - len(str(n)) - 1]}_{n}" in used:
        n += 1
    return f"{name[: MAX_NAME - len(str(n)) - 1]}_{n}"


def _parameters(info: ToolInfo) -> dict:
    """The tool's input schema, an object schema whatever the server left out."""
    schema = dict(info.input_schema or {})
    schema.setdefault("type", "object")
    if schema["type"] == "object":
        schema.setdefault("properties", {})
    return schema
