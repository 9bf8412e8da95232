"""The house's layout, pinned: every module sits in a layer and imports only from its own layer or
below (imports inside functions and under TYPE_CHECKING count too: ast.walk reads them all; drafters/
sits above engine/); no import cycle between
modules; Qt only in gui/; no module past ~500 lines. Read off the source with ast, so the rules
hold for code no test happens to run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "app" / "draftscope"

# Bottom to top. A module's layer is that of the longest prefix naming it.
LAYERS = [
    ["paths", "sysinfo", "_retriever", "draft_tree", "rules", "drafter_kinds", "optional_torch"],
    ["models", "retrieval"],  # getting models (catalogue, downloads, local files); the suffix-array index
    ["engine"],  # the decoder: backends, the stepper, answers, verification, sampling, the policy
    ["drafters"],  # drafting above it: the seam, every drafter (they use the engine; it takes them as given)
    ["storage", "datastore", "documents", "toolbox"],  # settings, history; datastores; the user's files; MCP tools
    ["drafters.recurrent.train"],  # training a recurrent head reads a datastore's sources
    ["core"],  # the application core: runtime, session, the drafter factory, words
    ["server"],
    ["commands", "bench", "gui"],
    ["cli", "__main__", "__init__"],
]
MAX_LINES = 500
# Modules a little past MAX_LINES ("about 500"), each held at its size: one dialog class each.
TOO_LONG: dict[str, int] = {}


def modules() -> dict[str, Path]:
    """Dotted names (without "draftscope.") -> files."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's modules ``name`` imports, anywhere in its file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
                targets = [f"draftscope.{stem}".rstrip(".")]
                targets += [f"draftscope.{stem}.{a.name}".replace("..", ".") for a in node.names]
            elif node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for target in targets:
            if not target.startswith("draftscope."):
                continue
            dotted = target.removeprefix("draftscope.")
            while dotted and dotted not in known:  # `from pkg import name`: the module, not the name
                dotted = dotted.rpartition(".")[0]
            if dotted and dotted != name:
                found.add(dotted)
                found |= packages_entered(name, dotted, known)
    return found


def packages_entered(importer: str, target: str, known: set[str]) -> set[str]:
    """Importing ``a.b.c`` runs ``a`` and ``a.b``'s ``__init__`` first: packages the importer is not
    inside count as imported too, so a cycle through a package's front door is seen."""
    parts = target.split(".")
    parents = {".".join(parts[:i]) for i in range(1, len(parts))}
    return {p for p in parents if p in known and p != importer and not importer.startswith(p + ".")}


def layer_of(name: str) -> int:
    best, layer = -1, None
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), number
    assert layer is not None, f"draftscope.{name} sits in no layer: add its folder to LAYERS"
    return layer


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(path, name, set(found)) for name, path in found.items()}


def upward_imports(graph) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)}


def test_every_import_goes_to_the_same_layer_or_below(graph):
    upward = sorted(upward_imports(graph))
    assert not upward, "\n".join(f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})" for a, b in upward)


def test_the_engine_imports_nothing_of_drafters(graph):
    """drafters/ sits above engine/: the engine takes drafters as given (drafters/interface.py's
    protocol) and never builds or imports one, not even inside a function."""
    found = sorted(
        (a, b) for a, targets in graph.items() for b in targets if a.startswith("engine") and b.startswith("drafters")
    )
    assert not found, found


def test_no_import_cycles(graph):
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "\n".join(cycles)


def test_qt_only_in_gui():
    outside = []
    for name, path in modules().items():
        if name.startswith("gui"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            if any(n.split(".")[0] in ("PySide6", "shiboken6") for n in names):
                outside.append(name)
    assert not outside, outside


def test_modules_stay_small():
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    too_long = {p: n for p, n in sizes.items() if n > MAX_LINES and n > TOO_LONG.get(p, 0)}
    assert not too_long, f"modules past {MAX_LINES} lines: {too_long}"
    assert all(p in sizes for p in TOO_LONG), "a module listed as too long is gone: drop it from TOO_LONG"


def test_no_two_modules_share_a_name():
    """A name says where a module is: `jobs.py` in two folders makes every mention ambiguous."""
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    assert not {name: where for name, where in seen.items() if len(where) > 1}


MAX_FUNCTION_LINES = 60  # from `def` to its last line, docstring included, as the formatter lays it out


def test_no_function_is_over_60_lines():
    """Issue 52: every function in the package, the GUI's widget construction included, is at most
    60 lines (long ones are cut into named steps)."""
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            size = node.end_lineno - node.lineno + 1 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else 0
            if size > MAX_FUNCTION_LINES:
                long[f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"] = size
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_engine_asks_no_drafter_or_backend_what_it_can_do():
    """Issue 50: what a drafter or a backend can do is declared in its base class
    (drafters/interface.py, engine/backends/base.py), never asked with hasattr."""
    asked = []
    for path in (PACKAGE / "engine").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(tree):
            asks = (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in ("hasattr", "getattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
            )  # a named ability
            if asks:
                subject = ast.unparse(node.args[0])
                if not subject.startswith("torch.") and (
                    any(w in subject for w in ("drafter", "backend")) or subject in ("d", "b")
                ):
                    asked.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    assert not asked, asked
