"""Property tests (hypothesis) of what Draftscope reads from files it did not write itself: the
conversation importers (the app's own JSON and ChatGPT's conversations.json) and the settings file.

Any file the importer reads gives its conversations, or its own error (ImportError_) with the
history as it was; what it imports exports to JSON and Markdown, and the JSON export imports
again as all duplicates. Any settings file gives Settings every face can use (no setting out of
range), saved and read back unchanged. The files are real JSON text, with what a damaged or
hostile one holds: random types where numbers and text go, numbers past a float's range, NaN and
infinity, broken characters (unpaired surrogates), nesting up to and past the recursion limit.
Derandomized (the same examples on every run) and bounded: about 10 s on one CPU core.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from draftscope.storage import HistoryStore, Settings, load_settings, save_settings
from draftscope.storage.import_check import FIGURES
from draftscope.storage.transfer import FORMAT, ROLES, ImportError_, export_json, import_file, write_export

FUZZ = settings(
    max_examples=120,
    deadline=5000,  # ms per example: each writes and reads real files on a shared CI machine
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---------------------------------------------------------------- JSON values, as a damaged file holds them

HUGE = st.sampled_from([10**401, -(10**401), 2**63, 2**64, 10**4000, -1, 0, 1e308])
TEXT = st.text(max_size=12) | st.text(st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=4)
NUMBER = st.integers() | HUGE | st.floats(allow_nan=True, allow_infinity=True)
SCALAR = st.none() | st.booleans() | NUMBER | TEXT
DEEP = "\x00deep:"  # a string standing for JSON nested that deep, spliced in as text (json.dumps would recurse)
NESTED = st.sampled_from([17, 900, 1200, 5000]).map(lambda n: f"{DEEP}{n}")
VALUE = st.recursive(
    SCALAR | NESTED, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3), max_leaves=8
)


def json_text(document) -> str:
    """``document`` as a file holds it: NaN and infinity as Python writes them, surrogates
    escaped, and each DEEP marker replaced by arrays nested that deep."""
    text = json.dumps(document)
    marker = json.dumps(DEEP)[1:-1]
    while (start := text.find('"' + marker)) >= 0:
        end = text.index('"', start + 1)
        depth = int(text[start + 1 + len(marker) : end])
        text = text[:start] + "[" * depth + "]" * depth + text[end + 1 :]
    return text


def either(good):
    """What a field holds: usually its own kind, sometimes anything at all."""
    return st.one_of(good, good, VALUE)


class Kinds(NamedTuple):
    """What a file's fields are drawn from: a damaged file's (any field may hold anything) or a
    sound file's (each field its own kind, in range)."""

    mix: Callable  # a field's own strategy -> what the field holds
    text: st.SearchStrategy
    time: st.SearchStrategy
    count: st.SearchStrategy
    json: st.SearchStrategy  # what is kept as it is (drafter settings)


DAMAGED = Kinds(either, TEXT, NUMBER, NUMBER, VALUE)
CLEAN_TEXT = st.text(max_size=12)
SOUND = Kinds(
    lambda good: good,
    CLEAN_TEXT,
    st.none() | st.floats(0, 2e9),
    st.integers(0, 10**6),
    st.dictionaries(CLEAN_TEXT, st.none() | st.booleans() | st.integers() | CLEAN_TEXT, max_size=3),
)


# ---------------------------------------------------------------- the app's own export, and ChatGPT's


def ours(k: Kinds) -> st.SearchStrategy:
    sent_file = st.fixed_dictionaries(
        {"name": k.mix(k.text), "text": k.mix(k.text)},
        optional={
            "kind": k.mix(k.text),
            "tokens": k.mix(k.count),
            "passages": k.mix(st.lists(k.mix(k.text), max_size=2)),
        },
    )
    stats = st.dictionaries(  # a figure of the wrong kind is left out, in a sound file too
        st.sampled_from([*FIGURES, "seed", "finish_reason", "future_figure"]), NUMBER | TEXT, max_size=5
    )
    message = st.fixed_dictionaries(
        {"role": k.mix(st.sampled_from(ROLES)), "content": k.mix(k.text)},
        optional={
            "created": k.mix(k.time),
            "stats": k.mix(stats),
            "drafters": k.json,
            "files": k.mix(st.lists(k.mix(sent_file), max_size=2)),
        },
    )
    conversation = st.fixed_dictionaries(
        {"title": k.mix(k.text), "messages": k.mix(st.lists(k.mix(message), max_size=3))},
        optional={"created": k.mix(k.time), "updated": k.mix(k.time)},
    )
    return st.fixed_dictionaries(
        {
            "format": st.just(FORMAT),
            "version": k.mix(st.just(1)),
            "conversations": k.mix(st.lists(k.mix(conversation), max_size=3)),
        }
    )


def chatgpt(k: Kinds) -> st.SearchStrategy:
    node_id = st.sampled_from(["root", "a", "b", "c"])
    message = st.fixed_dictionaries(
        {},
        optional={
            "author": k.mix(st.fixed_dictionaries({"role": k.mix(st.sampled_from(["user", "assistant", "system"]))})),
            "content": k.mix(st.fixed_dictionaries({"parts": k.mix(st.lists(k.mix(k.text), max_size=3))})),
            "create_time": k.mix(k.time),
        },
    )
    node = st.fixed_dictionaries(
        {}, optional={"parent": k.mix(node_id), "children": k.mix(st.lists(node_id)), "message": k.mix(message)}
    )
    conversation = st.fixed_dictionaries(
        {"mapping": k.mix(st.dictionaries(node_id, k.mix(node), max_size=4))},
        optional={
            "title": k.mix(k.text),
            "create_time": k.mix(k.time),
            "update_time": k.mix(k.time),
            "current_node": k.mix(node_id),
        },
    )
    return st.lists(conversation, max_size=3)


ANY_FILE = st.one_of(
    ours(DAMAGED).map(json_text),
    ours(SOUND).map(json_text),
    chatgpt(DAMAGED).map(json_text),
    chatgpt(SOUND).map(json_text),
    VALUE.map(json_text),
    ours(SOUND).map(json_text).flatmap(lambda t: st.integers(0, len(t)).map(lambda n: t[:n])),  # cut short
    st.sampled_from(["[" * 100_000 + "]" * 100_000, '{"format": "draftscope-conversations", "version": 1e999}']),
)


def contents(store: HistoryStore) -> list:
    return [
        (c.title, [(m.role, m.content, m.stats, m.files) for m in store.messages(c.id)]) for c in store.conversations()
    ]


@pytest.mark.timeout(120)
@FUZZ
@given(text=ANY_FILE)
def test_any_file_imports_its_conversations_or_says_why_and_imports_nothing(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "conversations.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        store = HistoryStore(Path(folder) / "history.sqlite3")
        first = store.create_conversation("Kept")
        store.add_message(first, "user", "hello")
        before = contents(store)
        try:
            report = import_file(store, path)
        except ImportError_ as exc:
            assert "conversations.json" in str(exc)
            assert contents(store) == before, "a refused file leaves the history as it was"
            event("refused")
            store.close()
            return
        event("imported some" if report.added else "imported none")
        assert len(store.conversations()) == 1 + report.added
        assert write_export(store, Path(folder) / "all.md") == 1 + report.added
        assert write_export(store, Path(folder) / "all.json") == 1 + report.added
        again = import_file(store, Path(folder) / "all.json")
        assert (again.added, again.duplicates) == (0, 1 + report.added), "the export reads back as the same"
        assert len(export_json(store)["conversations"]) == 1 + report.added
        store.close()


# ---------------------------------------------------------------- the settings file

DEFAULTS = Settings()
DEFAULTS.problems()  # its first call imports the workers' address parser (seconds): no file's time


def setting_value(name: str):
    """A value for the setting ``name``: of its own kind (edges included) or anything at all."""
    default = getattr(DEFAULTS, name)
    if isinstance(default, bool):
        own = st.booleans()
    elif isinstance(default, (int, float)):
        own = NUMBER
    elif isinstance(default, str):
        own = TEXT
    elif isinstance(default, list):
        own = st.lists(either(TEXT), max_size=8)
    else:  # the drafters' switches, the user's presets
        keys = st.sampled_from(sorted(default)) | TEXT if default else TEXT
        own = st.dictionaries(keys, either(st.booleans() | TEXT), max_size=6)
    return either(own)


@st.composite
def settings_files(draw) -> str:
    names = draw(st.lists(st.sampled_from([f.name for f in fields(Settings)]), unique=True, max_size=8))
    values = {name: draw(setting_value(name)) for name in names}
    version = draw(either(st.sampled_from([1, 2, 2, 2])))
    if version == 1:
        return json_text({"version": 1, **values})
    sections: dict = {}
    for f in fields(Settings):
        if f.name in values:
            sections.setdefault(f.metadata["section"].key, {})[f.name] = values[f.name]
    if draw(st.booleans()) and sections:  # a section that is not an object
        sections[draw(st.sampled_from(sorted(sections)))] = draw(VALUE)
    return json_text({"version": version, **sections})


@pytest.mark.timeout(120)
@FUZZ
@given(text=settings_files() | VALUE.map(json_text) | st.text(max_size=40))
def test_any_settings_file_loads_as_settings_every_face_can_use(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "settings.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        loaded, notices = load_settings(path)
        event("with notices" if notices else "clean")
        assert isinstance(loaded, Settings) and all(isinstance(n, str) for n in notices)
        assert loaded.problems() == [], "every setting loaded is in range"
        save_settings(loaded, path)
        assert load_settings(path) == (loaded, []), "saved and read back unchanged"
