"""docs/architecture.md is a map, and a map must be true: every module or folder it names in code
(an inline code span, or a word in a fenced block, that ends in ``.py`` or ``/``) exists under
app/draftscope or, for things like ``retriever_rs/`` and ``scripts/``, under the repository root;
and the map stays short enough to be read (at most MAX_LINES lines)."""

from __future__ import annotations

import re
from pathlib import Path

MAX_LINES = 260
PATHLIKE = re.compile(r"[\w.*-]+(?:/[\w.*-]+)*(?:\.py|/)")  # no spaces: engine/stepper.py, gui/chat/, bench_*.py
INLINE_SPAN = re.compile(r"(`+)(.+?)\1")  # Markdown's inline code, one or more backticks either side
FENCE = re.compile(r"^\s*(```|~~~)")
EDGE_PUNCTUATION = "()[]{},;:'\"."  # around a word; a leading "." stays (.venv/)


def repo_root() -> Path:
    """The folder holding pyproject.toml, searched upward, so this file may move within tests/."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    raise AssertionError(f"no pyproject.toml above {__file__}")


def named_paths(text: str) -> list[str]:
    """The path-like names in the map's code: inline spans whole, fenced blocks word by word."""
    names, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            candidates = [word.lstrip(EDGE_PUNCTUATION.rstrip(".")).rstrip(EDGE_PUNCTUATION) for word in line.split()]
        else:
            candidates = [span.strip() for _, span in INLINE_SPAN.findall(line)]
        names += [c for c in candidates if PATHLIKE.fullmatch(c) and not c.startswith("/")]
    return names


def exists(name: str, package: Path, root: Path) -> bool:
    """Under the package first, then at the repository root; ``*`` in a name is a glob."""
    for base in (package, root):
        if "*" in name.rstrip("/"):
            if any(base.glob(name.rstrip("/"))):
                return True
        elif (base / name).is_dir() if name.endswith("/") else (base / name).is_file():
            return True
    return False


def missing_names(text: str, root: Path) -> list[str]:
    package = root / "app" / "draftscope"
    return sorted({name for name in named_paths(text) if not exists(name, package, root)})


def map_text() -> str:
    return (repo_root() / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_every_module_the_map_names_exists():
    missing = missing_names(map_text(), repo_root())
    assert not missing, "docs/architecture.md names what app/draftscope and the repository lack: " + ", ".join(missing)


def test_the_map_stays_short():
    lines = len(map_text().splitlines())
    assert lines <= MAX_LINES, f"docs/architecture.md has {lines} lines: a map holds at most {MAX_LINES}"


def test_the_check_finds_a_wrong_name():
    """The test can fail: a name that is not there is caught, in a span and in a fenced block alike,
    and names that are there, spaces and plain words are not."""
    root = repo_root()
    text = (
        "`engine/stepper.py` and `engine/no_such_module.py`, `gui/chat/`, `no_such_folder/`,\n"
        "`draftscope bench spec`, `retriever_rs/`, `scripts/bench_*.py`, plain engine/gone.py\n"
        "```\nengine/answer.py (engine/also_gone.py:) tests/\n```\n"
    )
    assert missing_names(text, root) == ["engine/also_gone.py", "engine/no_such_module.py", "no_such_folder/"]
