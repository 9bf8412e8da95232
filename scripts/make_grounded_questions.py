"""Write app/draftscope/bench/grounded_questions.jsonl: answers grounded in a text the user gives.

Fifteen prompts in the Spec-Bench format, built from texts that ship with Python (the standard
library's own source, and the language reference's sections in pydoc_data.topics): code edits that
give back a whole function with small changes, bug fixes that give back the corrected function,
summaries, answers that quote, and whole files (300-600 lines) given back with a rename used
throughout, a docstring fixed and one function changed. These are the answers that copy their
context, where a drafter that reads the conversation can pay even on a CPU. The file is written once
and shipped, the texts in it, so every run reads the same prompts whatever Python runs the benchmark:

    python scripts/make_grounded_questions.py
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from pathlib import Path
from pydoc_data import topics

OUT = Path(__file__).resolve().parent.parent / "app" / "draftscope" / "bench" / "grounded_questions.jsonl"


def module_source(module: str) -> str:
    """A standard-library module's whole file, as the running Python ships it."""
    return Path(inspect.getfile(importlib.import_module(module))).read_text(encoding="utf-8")


def function(module: str, name: str) -> str:
    """A function's source as the module's file writes it (C-accelerated modules included)."""
    source = module_source(module)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(source, node)
    raise LookupError(f"{module}.{name} not found")


def planted(code: str, right: str, wrong: str, where: str) -> str:
    """``code`` with its one ``right`` replaced by ``wrong``: the mistake a prompt asks to fix."""
    if code.count(right) != 1:
        raise ValueError(f"{where}: {right!r} must occur once")
    return code.replace(right, wrong)


def broken(module: str, name: str, right: str, wrong: str) -> str:
    return planted(function(module, name), right, wrong, f"{module}.{name}")


def code_prompt(instruction: str, code: str) -> str:
    return f"{instruction}\n\n```python\n{code}\n```"


def text_prompt(instruction: str, topic: str) -> str:
    return f"{instruction}\n\n{topics.topics[topic].strip()}"


WHOLE = "Give back the whole function, code only."
FIX = "Find the bug, fix it, and give back the whole corrected function, code only."
FILE_LINES = (300, 600)  # a whole file: long enough that copying it is most of the answer


def file_prompt(module: str, changes: list[str], right: str, wrong: str) -> str:
    """A whole standard-library file with one mistake planted in a docstring, and the changes to
    make (the docstring's fix among them); the answer is the file given back."""
    source = module_source(module)
    lines = source.count("\n")
    if not FILE_LINES[0] <= lines <= FILE_LINES[1]:
        raise ValueError(f"{module}: {lines} lines, not {FILE_LINES[0]}-{FILE_LINES[1]}")
    steps = "\n".join(f"{i}. {change}" for i, change in enumerate(changes, start=1))
    return (
        f"Here is Lib/{module}.py from Python's standard library. Make these changes and give back the "
        f"whole file, everything else exactly as it is, code only:\n{steps}\n\n"
        f"```python\n{planted(source, right, wrong, module)}```"
    )


def file_rewrites() -> list[str]:
    return [
        file_prompt(
            "queue",
            [
                "Rename `maxsize` to `capacity` everywhere (parameters, attributes, docstrings, comments).",
                "The docstring of `Queue.full` says it tells whether the queue is empty: fix it.",
                "Make `task_done` raise ValueError('task_done() called more times than items were put').",
            ],
            "Return True if the queue is full, False otherwise",
            "Return True if the queue is empty, False otherwise",
        ),
        file_prompt(
            "shlex",
            [
                "Rename the attribute `debug` to `verbosity` everywhere.",
                "The docstring of the function `split` says it joins the string: fix it.",
                "Make `split` raise TypeError('s must be a string, not None') when s is None, instead of warning.",
            ],
            '"""Split the string *s* using shell-like syntax."""',
            '"""Join the string *s* using shell-like syntax."""',
        ),
        file_prompt(
            "copy",
            [
                "Rename `memo` to `seen` everywhere (parameters, variables, comments, docstrings).",
                "The docstring of `deepcopy` says it makes a shallow copy: fix it.",
                "Make `copy` raise TypeError instead of Error for an object it cannot copy, with the same message.",
            ],
            '"""Deep copy operation on arbitrary Python objects.',
            '"""Shallow copy operation on arbitrary Python objects.',
        ),
    ]


def questions() -> list[dict]:
    edits = [
        code_prompt(f"Add type hints to this function. {WHOLE}", function("colorsys", "rgb_to_hsv")),
        code_prompt(
            f"Rename the parameter `name` to `target` everywhere in this function. {WHOLE}", function("os", "makedirs")
        ),
        code_prompt(
            f"Rename the variable `it` to `iterator` everywhere in this function. {WHOLE}",
            function("heapq", "nsmallest"),
        ),
    ]
    fixes = [
        code_prompt(
            f"This function never returns for some inputs when a key is given. {FIX}",
            broken(
                "bisect",
                "bisect_left",
                "if key(a[mid]) < x:\n                lo = mid + 1",
                "if key(a[mid]) < x:\n                lo = mid",
            ),
        ),
        code_prompt(
            f"This function indents the wrong lines. {FIX}",
            broken("textwrap", "indent", "if predicate(line)", "if not predicate(line)"),
        ),
        code_prompt(
            f"This function gives the wrong median for lists of odd length. {FIX}",
            broken("statistics", "median", "return data[n // 2]", "return data[n // 2 - 1]"),
        ),
    ]
    summaries = [
        text_prompt("Summarize this section of the Python language reference in one paragraph.", "with"),
        text_prompt("Summarize this section of the Python language reference as five bullet points.", "exceptions"),
        text_prompt("Summarize this section of the Python language reference in one paragraph.", "for"),
    ]
    quotes = [
        text_prompt(
            "Quote, word for word, the sentences of this text that say what happens when a finally "
            "clause runs a return statement, then explain them in one sentence.",
            "try",
        ),
        text_prompt("Quote, word for word, the steps this text says the import statement performs.", "import"),
        text_prompt("Quote, word for word, what this text says about names listed in a global statement.", "global"),
    ]
    out = []
    for category, prompts in (
        ("grounded-edit", edits),
        ("grounded-fix", fixes),
        ("grounded-summary", summaries),
        ("grounded-quote", quotes),
        ("grounded-file", file_rewrites()),
    ):
        for i, prompt in enumerate(prompts, start=1):
            out.append({"question_id": f"{category}-{i}", "category": category, "turns": [prompt]})
    return out


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions()), encoding="utf-8")
    print(f"wrote {OUT} ({len(questions())} questions)")
