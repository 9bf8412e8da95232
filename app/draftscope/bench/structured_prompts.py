"""The prompts of ``draftscope bench structured`` (structured_prompts.jsonl beside this file): JSON
extraction tasks written from texts that ship with Python (standard-library docstrings and source, the
language reference's sections in pydoc_data.topics, CPython's LICENSE.txt, the Zen of Python), each
with the JSON schema its answer is held to; and tool calls (a ``tools`` list, a question that needs one
of them, ``tool_choice`` "required"). The file is written once and shipped, the texts in it, so every run
reads the same prompts whatever Python runs the benchmark:

    python -m draftscope.bench.structured_prompts

A line: ``id``, ``kind`` ("extract" or "tool"), ``source`` (where its text comes from), ``messages``,
then ``schema`` (extract) or ``tools`` and ``tool_choice`` (tool)."""

from __future__ import annotations

import codecs
import contextlib
import importlib
import inspect
import io
import json
import os
from pathlib import Path
from pydoc_data import topics

PROMPTS = Path(__file__).with_name("structured_prompts.jsonl")
KINDS = ("extract", "tool")


def load(path: str | Path = PROMPTS) -> list[dict]:
    """The prompts of a file in this format; a line without its fields is an error naming it."""
    prompts = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        needed = {"id", "kind", "messages"} | ({"schema"} if row.get("kind") == "extract" else {"tools"})
        if row.get("kind") not in KINDS or not needed <= set(row):
            raise ValueError(f"{path}, line {number}: a prompt needs {', '.join(sorted(needed))} and a kind of {KINDS}")
        prompts.append(row)
    if not prompts:
        raise ValueError(f"no prompts in {path}")
    return prompts


def _text(kind: str, **properties) -> dict:
    return {"type": kind, **properties}


def _object(**properties) -> dict:
    """An object with exactly these properties, all required (OpenAI's strict shape)."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _array(items: dict, most: int) -> dict:
    return {"type": "array", "items": items, "minItems": 1, "maxItems": most}


STRING = _text("string")
SHORT = _text("string", maxLength=200)
FUNCTION = _object(
    name=STRING,
    purpose=SHORT,
    arguments=_array(_object(name=STRING, description=SHORT), 12),
    returns=SHORT,
)


def docstring(dotted: str) -> str:
    module, name = dotted.rsplit(".", 1)
    return inspect.getdoc(getattr(importlib.import_module(module), name)) or ""


def _doc_prompt(dotted: str, ask: str) -> str:
    return f"Here is the docstring of Python's `{dotted}`.\n\n{docstring(dotted)}\n\n{ask} Answer in JSON."


def _topic(name: str, ask: str) -> str:
    section = topics.topics[name].strip()
    return f"Here is a section of the Python language reference.\n\n{section}\n\n{ask} Answer in JSON."


def _licence() -> str:
    return (Path(os.__file__).parent / "LICENSE.txt").read_text(encoding="utf-8")


def _licence_table() -> str:
    text = _licence()
    start = text.index("    Release")
    return text[start : text.index("Footnotes:", start)].rstrip()


def _zen() -> str:
    with contextlib.redirect_stdout(io.StringIO()):  # importing it prints it
        this = importlib.import_module("this")
    return codecs.decode(this.s, "rot13")


def _source_lines(module: str, first: str, last: str) -> str:
    """The lines of a standard-library module's source from the one holding ``first`` to the one holding ``last``."""
    lines = inspect.getsource(importlib.import_module(module)).splitlines()
    start = next(i for i, line in enumerate(lines) if first in line)
    end = next(i for i, line in enumerate(lines) if i >= start and last in line)
    return "\n".join(lines[start : end + 1])


def _function_rows() -> list[tuple[str, str, dict]]:
    """Docstrings of functions: what each takes and gives back."""
    args_with_defaults = _object(
        name=STRING,
        purpose=SHORT,
        arguments=_array(_object(name=STRING, default=_text("string"), meaning=SHORT), 16),
        returns=SHORT,
    )
    return [
        ("doc-textwrap-wrap", _doc_prompt("textwrap.wrap", "Give its name, purpose, arguments and what it returns."),
         FUNCTION),
        ("doc-heapq-merge", _doc_prompt("heapq.merge", "Give its name, purpose, arguments, what it returns, and "
                                        "whether it reads its inputs lazily."),
         _object(**FUNCTION["properties"], lazy=_text("boolean"))),
        ("doc-json-dumps", _doc_prompt("json.dumps", "List every keyword argument with its default value (as "
                                       "written in Python) and its meaning."), args_with_defaults),
        ("doc-shutil-copytree", _doc_prompt("shutil.copytree", "Give its name, purpose, each argument with its "
                                            "default and meaning, and what it returns."), args_with_defaults),
        ("doc-os-makedirs", _doc_prompt("os.makedirs", "Say what it does and what happens when the directory "
                                        "exists."),
         _object(name=STRING, purpose=SHORT, creates_parents=_text("boolean"),
                 when_it_exists=_text("string", enum=["raises unless exist_ok", "always raises", "does nothing"]))),
        ("doc-subprocess-run", _doc_prompt("subprocess.run", "Describe what it returns and which exceptions it "
                                           "raises, and when."),
         _object(name=STRING, returns=_object(type=STRING, attributes=_array(STRING, 8)),
                 raises=_array(_object(exception=STRING, when=SHORT), 6))),
        ("doc-functools-lru_cache", _doc_prompt("functools.lru_cache", "Say what kind of callable it is, its "
                                                "parameters, and the methods it adds to the function it wraps."),
         _object(name=STRING, kind=_text("string", enum=["decorator", "function", "class", "context manager"]),
                 parameters=_array(_object(name=STRING, meaning=SHORT), 6), added_methods=_array(STRING, 6))),
        ("doc-urlsplit", _doc_prompt("urllib.parse.urlsplit", "Apply it to "
                                     "https://docs.python.org:443/3/library/urllib.parse.html?highlight=split#urlsplit"
                                     " and give each part."),
         _object(scheme=STRING, netloc=STRING, path=STRING, query=STRING, fragment=STRING,
                 port=_text("integer"))),
    ]  # fmt: skip


def _text_rows() -> list[tuple[str, str, dict]]:
    """The language reference, the licence, the Zen, module source: facts out of prose and tables."""
    release = _object(release=STRING, derived_from=STRING, years=STRING, owner=_text("string", enum=[
        "CWI", "CNRI", "BeOpen.com", "PSF"]), gpl_compatible=_text("boolean"))  # fmt: skip
    space = _text("string", enum=["RGB", "YIQ", "HLS", "HSV"])
    theme = _text("string", enum=["beauty", "clarity", "simplicity", "errors", "practicality", "timing", "design"])
    return [
        ("topic-assert", _topic("assert", "Give the statement's two forms and the code each is equivalent to, "
                                "and when the checks are left out."),
         _object(statement=STRING, forms=_array(_object(form=STRING, equivalent=STRING), 2),
                 removed_when=SHORT, raises=STRING)),
        ("topic-with", _topic("with", "List the steps a with statement with one item runs, in order."),
         _object(statement=STRING, steps=_array(SHORT, 10), exception_suppressed_when=SHORT)),
        ("topic-lambda", _topic("lambda", "Say what a lambda expression creates and what it can hold."),
         _object(keyword=STRING, creates=_text("string", enum=["function", "class", "generator", "coroutine"]),
                 body=_text("string", enum=["one expression", "statements", "annotations"]), equivalent_def=STRING)),
        ("topic-for", _topic("for", "Say how the loop runs and when its else clause runs."),
         _object(statement=STRING, iterates_over=SHORT, else_runs=_text("string", enum=[
             "always", "when the loop was not ended by break", "never", "after an exception"]),
             ends_early_with=_array(STRING, 3))),  # fmt: skip
        ("licence-history", "Here is the history table from CPython's LICENSE.txt.\n\n" + _licence_table()
         + "\n\nGive the first eight rows. Answer in JSON.", _object(releases=_array(release, 8))),
        ("licence-people", "Here is the start of CPython's LICENSE.txt.\n\n" + _licence()[:2400]
         + "\n\nName the organisations in Python's history, in order, with where each was and the years. "
           "Answer in JSON.",
         _object(creator=STRING, organisations=_array(_object(name=STRING, place=STRING, years=STRING), 6))),
        ("zen", "Here is the Zen of Python.\n\n" + _zen() + "\n\nGive its title, author and its first six "
         "aphorisms, each with its theme. Answer in JSON.",
         _object(title=STRING, author=STRING, aphorisms=_array(_object(text=STRING, theme=theme), 6))),
        ("http-status-4xx", "Here is part of Lib/http/__init__.py.\n\n```python\n"
         + _source_lines("http", "# client error", "REQUEST_HEADER_FIELDS_TOO_LARGE") + "\n```\n\n"
         "List the first ten status codes with their phrases. Answer in JSON.",
         _object(codes=_array(_object(code=_text("integer"), name=STRING, phrase=STRING), 10))),
        ("colorsys-functions", "Here is Lib/colorsys.py.\n\n```python\n"
         + inspect.getsource(importlib.import_module("colorsys")) + "\n```\n\n"
         "List its public conversion functions with the colour spaces they convert between. Answer in JSON.",
         _object(module=STRING, functions=_array(_object(name=STRING, source=space, target=space), 8))),
    ]  # fmt: skip


def _tool(tool: str, description: str, **parameters) -> dict:
    return {"type": "function", "function": {"name": tool, "description": description,
                                             "parameters": _object(**parameters)}}  # fmt: skip


TOOLS = {
    "python_docs": _tool("python_docs", "Look up the documentation of a name in Python's standard library",
                         module=STRING, name=STRING),
    "run_python": _tool("run_python", "Run a short Python program and return what it prints", code=STRING),
    "http_status": _tool("http_status", "What an HTTP status code means", code=_text("integer")),
    "convert_units": _tool("convert_units", "Convert a quantity between units", value=_text("number"),
                           from_unit=_text("string", enum=["mi", "km", "lb", "kg", "F", "C"]),
                           to_unit=_text("string", enum=["mi", "km", "lb", "kg", "F", "C"])),
    "calendar_day": _tool("calendar_day", "The weekday of a date", year=_text("integer"),
                          month=_text("integer", minimum=1, maximum=12), day=_text("integer", minimum=1, maximum=31)),
    "find_files": _tool("find_files", "Find files whose names match a glob pattern", pattern=STRING,
                        directory=STRING, recursive=_text("boolean")),
    "create_event": _tool("create_event", "Put an event in the user's calendar", title=STRING,
                          date=_text("string", description="YYYY-MM-DD"), start=_text("string", description="HH:MM"),
                          minutes=_text("integer"), attendees=_array(STRING, 10)),
    "weather": _tool("weather", "Today's weather in a city", city=STRING,
                     unit=_text("string", enum=["celsius", "fahrenheit"])),
    "hash_text": _tool("hash_text", "A hash of a text", text=STRING,
                       algorithm=_text("string", enum=["md5", "sha1", "sha256"])),
}  # fmt: skip
TOOL_ASKS = [
    ("tool-docs", ["python_docs", "run_python"], "What arguments does textwrap.shorten take?"),
    ("tool-status", ["http_status", "weather"], "My request to the API came back with status 429. What does it mean?"),
    ("tool-units", ["convert_units", "run_python"], "How many kilometres is a marathon of 26.2 miles?"),
    ("tool-weekday", ["calendar_day", "weather"], "Which day of the week is the 1st of March 2025?"),
    ("tool-files", ["find_files", "run_python"], "Find every .toml file under ~/projects, subfolders included."),
    (
        "tool-event",
        ["create_event", "weather"],
        "Put a 45-minute design review on 2025-03-14 at 10:00 with Ana and Li.",
    ),
    ("tool-weather", ["weather", "calendar_day"], "Do I need a coat in Oslo today? Celsius, please."),
    ("tool-hash", ["hash_text", "run_python"], "Give me the SHA-256 of the text 'draftscope'."),
]


def build() -> list[dict]:
    rows = [
        {"id": key, "kind": "extract", "messages": [{"role": "user", "content": text}], "schema": schema}
        for key, text, schema in [*_function_rows(), *_text_rows()]
    ]
    for key, tools, ask in TOOL_ASKS:
        rows.append(
            {
                "id": key,
                "kind": "tool",
                "messages": [{"role": "user", "content": ask}],
                "tools": [TOOLS[name] for name in tools],
                "tool_choice": "required",
            }
        )
    return rows


if __name__ == "__main__":
    PROMPTS.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in build()), encoding="utf-8")
    print(f"wrote {PROMPTS}")
