"""One source for each rule (issue 34): the backend and precision names, llama.cpp's context and
the sampling ranges live in rules.py, folders in paths.py, colours in gui/palettes.py; every face
applies the same ranges (the server's narrower temperature stated once), and the seed has one form
past the settings file (None: none chosen)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from draftscope import rules
from draftscope.core.session import sampling_from
from draftscope.drafter_kinds import default_switches, drafter_names
from draftscope.engine.sampling import SamplingParams
from draftscope.server.protocol import ApiError, parse_chat
from draftscope.storage.settings import Settings

PACKAGE = Path(__file__).resolve().parents[2] / "app" / "draftscope"


def sources(folder: Path = PACKAGE):
    for path in sorted(folder.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8")


def literal_collections(text: str):
    """The values of every literal tuple, list and set of constants: a rule copied as a list, or in
    another order, is still a copy."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(e, ast.Constant) for e in node.elts):
            yield frozenset(e.value for e in node.elts)


def test_backend_precision_and_drafter_names_are_written_once():
    places = {
        rule: [name for name, text in sources() if frozenset(rule) in set(literal_collections(text))]
        for rule in (rules.BACKENDS, rules.DTYPES)
    }
    assert all(where == ["rules.py"] for where in places.values()), places
    # the drafters are rows of drafter_kinds.py: their names, or those on by default, never a list
    on = frozenset(name for name, value in default_switches().items() if value)
    drafter_lists = [
        name for name, text in sources() if {frozenset(drafter_names()), on} & set(literal_collections(text))
    ]
    assert not drafter_lists, drafter_lists
    assert Settings().drafters == default_switches()
    dialog = (PACKAGE / "gui" / "dialogs" / "settings_dialog.py").read_text()
    choices = next(
        node.value
        for node in ast.walk(ast.parse(dialog))
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "BACKEND_CHOICES"
    )
    assert sorted(pair[0] for pair in ast.literal_eval(choices)) == sorted(rules.BACKENDS)


def test_a_rule_copied_as_a_list_or_reordered_is_caught():
    copies = f"A = {list(reversed(rules.BACKENDS))!r}\nB = {set(rules.DTYPES)!r}\n"
    found = set(literal_collections(copies))
    assert frozenset(rules.BACKENDS) in found and frozenset(rules.DTYPES) in found


def test_llama_cpp_s_context_is_written_once():
    from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT
    from draftscope.models.catalog import LLAMA_CONTEXT

    assert DEFAULT_CONTEXT == LLAMA_CONTEXT == rules.LLAMA_CONTEXT
    written = [
        name
        for name, text in sources()
        for line in text.splitlines()
        if re.search(r"\b4096\b", line) and "context" in line.lower()
    ]
    assert written == ["rules.py"], written


def test_folders_are_named_only_in_paths_py():
    built = [
        name
        for name, text in sources()
        if name != "paths.py" and re.search(r"(data_dir|cache_dir|config_dir)\(\)\s*/", text)
    ]
    assert not built, built


def test_colours_are_written_only_in_palettes():
    found = [
        name
        for name, text in sources(PACKAGE / "gui")
        if not name.endswith("palettes.py") and re.search(r"#[0-9a-fA-F]{6}\b", text)
    ]
    assert not found, found


@pytest.mark.parametrize(
    "name, good, bad",
    [
        ("temperature", 5.0, 5.01),
        ("top_p", 1.0, 0.0),
        ("top_k", 1_000_000, -1),
        ("repetition_penalty", 10.0, 0.0),
    ],
)
def test_the_settings_and_the_engine_apply_the_same_ranges(name, good, bad):
    assert not Settings(**{name: good}).problems()
    assert Settings(**{name: bad}).problems() == [rules.problem(name, bad)]
    SamplingParams(**{name: good})
    with pytest.raises(ValueError, match=re.escape(rules.problem(name, bad))):
        SamplingParams(**{name: bad})


def test_the_server_keeps_openai_s_temperature_range_and_refuses_what_the_engine_would():
    def parse(**fields):
        return parse_chat({"messages": [{"role": "user", "content": "x"}], **fields})

    assert parse(temperature=2.0).sampling.overrides["temperature"] == 2.0
    with pytest.raises(ApiError, match=re.escape("'temperature' must be between 0 and 2, got 2.5")):
        parse(temperature=2.5)
    assert Settings(temperature=2.5).problems() == []  # the app's own range is wider
    with pytest.raises(ApiError, match=re.escape("'top_p' must be in (0, 1], got 0")):
        parse(top_p=0)  # once a 500 (the engine refused what the server let through)


def test_the_seed_has_one_form_past_the_settings_file():
    assert sampling_from(Settings(seed=rules.NO_SEED, temperature=0.7)).seed is None
    assert sampling_from(Settings(seed=42, temperature=0.7)).seed == 42
    assert sampling_from(Settings(seed=rules.NO_SEED, temperature=0.7), seed=7).seed == 7
    assert "seed must be -1 (a new one for every answer) or between 0 and 2,147,483,647" in Settings(seed=-2).problems()
