"""A conversation as Markdown (storage/history.py's export): each message under its role, its
attachments named, an answer's figures in one line, an answer's tool calls (the tool and its
arguments) and each tool result (its first lines and its whole size).

Whatever a stored or imported message holds, the export is written: a figure or a tool field of
the wrong kind is left out, never an error that would stop "Export all" for every conversation.
"""

from __future__ import annotations

import json
import re

RESULT_LINES = 8  # a tool result's first lines shown; its size says how much more there was


def conversation_markdown(title: str, messages) -> str:
    """``messages`` (history.Message, the current branch) under the conversation's ``title``."""
    lines = [f"# {title}", ""]
    for m in messages:
        lines += [f"## {_heading(m.role, m.tool_fields)}", ""]
        lines += [
            f"*Attached: {f['name']}" + (f" ({len(f['passages'])} passages)*" if f.get("passages") else "*")
            for f in m.files
        ] + ([""] if m.files else [])
        if m.role == "tool":
            lines += _result_lines(m.content, m.tool_fields)
        elif m.content.strip() or not m.tool_fields:  # an answer that only called has no prose
            lines += [m.content.rstrip(), ""]
        lines += _call_lines(m.tool_fields)
        if isinstance(m.stats, dict) and (figures := _figures_line(m.stats)):
            lines += [f"*{figures}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def _heading(role: str, fields: dict) -> str:
    """ "Tool: read_note (files)" for a result; the role for the rest."""
    if role != "tool":
        return role.capitalize()
    name, server = _text(fields.get("name")), _text(fields.get("server"))
    return "Tool" + (f": {name}" if name else "") + (f" ({server})" if server else "")


def _call_lines(fields: dict) -> list[str]:
    """An answer's calls: each tool's name and its arguments as JSON."""
    calls = fields.get("tool_calls")
    out: list[str] = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        out += [f"*Calls `{_text(function.get('name')) or '?'}` with:*", "", *_fenced(shown, "json"), ""]
    return out


def _result_lines(content: str, fields: dict) -> list[str]:
    """A tool's result: its status when it did not run to an answer, its first lines, its size."""
    status = _text(fields.get("status"))
    chars = fields.get("chars")
    size = chars if isinstance(chars, int) and not isinstance(chars, bool) and chars >= 0 else len(content)
    lines = content.splitlines()
    shown = lines[:RESULT_LINES]
    note = f"{size:,} characters" + (
        f", the first {RESULT_LINES} of {len(lines)} lines shown" * (len(lines) > RESULT_LINES)
    )
    out = [f"*{status}*", ""] if status and status != "ok" else []
    return out + [*_fenced("\n".join(shown), "text"), "", f"*{note}*", ""]


def _fenced(text: str, language: str) -> list[str]:
    """``text`` in a code fence longer than any run of backticks in it (so it cannot close early)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + language, *text.splitlines(), fence]


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _figures_line(stats: dict) -> str:
    """An answer's figures for Markdown; one missing or not a number it can show (an imported
    file's) is left out, never an error."""
    forms = (
        ("tokens", "{:.0f} tokens"),
        ("tau", "tau {:.2f}"),
        ("tokens_per_second", "{:.1f} tokens/s"),
        ("speedup_estimate", "{:.2f}x"),
    )
    shown = [(form, v) for key, form in forms if (v := _finite(stats.get(key))) is not None and (v or key == "tokens")]
    return " · ".join(form.format(v) for form, v in shown)


def _finite(value) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not -1e300 < value < 1e300:
        return None  # compared before converting: an int past a float's range would raise
    return float(value)
