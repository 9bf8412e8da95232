"""One drafter registry (issue 64): every drafter kind has its words and both colours, ``--drafters``
has one parser, and a row added to the table is listed by the factory, the settings, the command
line's help and the settings dialog without another edit."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from draftscope import drafter_kinds
from draftscope.core.drafter_factory import drafter_maker, names_from_switches, parse_drafter_names
from draftscope.draft_tree import DraftSource
from draftscope.drafter_kinds import (
    DrafterKind,
    Need,
    Support,
    drafter_switches,
    kinds,
    parse_drafters,
    probability_sources,
)
from draftscope.gui.chat.render import provenance_legend, provenance_words
from draftscope.gui.palettes import PROVENANCE_COLOURS
from draftscope.storage.settings import Settings

# A kind with no module behind it: enough for everything that lists kinds.
ECHO = DrafterKind(
    "echo", DraftSource.ORACLE, "Echo (a test's drafter)", "echoed", True, drafter_kinds.NOTHING, Support.COUNT
)


def unfinished(kind: DrafterKind) -> list[str]:
    """What a kind lacks for the window: its words, or a colour in either theme."""
    lacks = [what for what in ("label", "drafted") if not getattr(kind, what)]
    return lacks + [f"{theme} colour" for theme in ("light", "dark") if kind.name not in PROVENANCE_COLOURS[theme]]


def test_every_kind_has_its_words_and_both_colours():
    assert {k.name: unfinished(k) for k in kinds() if unfinished(k)} == {}
    assert unfinished(ECHO) == ["light colour", "dark colour"], "a kind without colours is caught"
    assert unfinished(dataclasses.replace(kinds()[0], label="")) == ["label"]
    for k in kinds():
        assert k.source.name.lower() == k.name, "events name a token's drafter by its source"
        assert provenance_words(k.name) == k.drafted and f"&nbsp;{k.name}&nbsp;" in provenance_legend(dark=True)
        assert k.needs is drafter_kinds.NOTHING or k.needs_message().startswith(f"the {k.name} drafter needs ")


def test_the_parser_takes_auto_none_and_lists_and_names_the_known_kinds_otherwise():
    assert parse_drafters("auto") is None and parse_drafters(" none ") == []
    assert parse_drafters("context, retrieval,") == ["context", "retrieval"], "the order given is kept"
    with pytest.raises(ValueError) as refused:
        parse_drafters("context,ngram")
    assert str(refused.value) == "unknown drafter(s): ngram (known: retrieval, learned, context, model, recurrent)"


def test_one_rule_for_the_default_drafters():
    defaults = Settings().drafters
    assert defaults == {"retrieval": True, "learned": True, "context": True, "model": False, "recurrent": True}
    assert drafter_switches("auto", draft_model=False) == (defaults, [])
    assert drafter_switches("auto", draft_model=True) == ({**defaults, "model": True}, [])
    assert drafter_switches("none", draft_model=True) == (dict.fromkeys(defaults, False), [])
    # a switch the settings do not name has its default, as a settings file missing one reads
    names, notes = names_from_switches({"model": True}, have_datastore=False, have_draft_model=False)
    assert names == ["learned", "context"]
    assert notes == [
        "retrieval drafts are off: no datastore for this model "
        "(File ▸ Build a datastore… in the app, or draftscope datastore build-default)",
        "model drafts are off: no usable draft model is set (the Model tab's draft model in the app, or --draft-model)",
    ]
    auto = parse_drafter_names("auto", have_datastore=True, have_draft_model=True, have_learned=False, have_head=True)
    assert auto == ["retrieval", "context", "model", "recurrent"]


def test_supports_are_counted_as_the_table_says():
    assert set(probability_sources()) == {DraftSource.MODEL, DraftSource.RECURRENT}


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setattr(drafter_kinds, "KINDS", (*drafter_kinds.KINDS, ECHO))
    return ECHO


def test_a_new_row_is_listed_by_the_settings_the_factory_and_the_command_line(echo):
    from draftscope.commands.model_options import add_model_arguments

    assert Settings().drafters["echo"] is True
    assert "echo" in parse_drafter_names("auto", have_datastore=False, have_draft_model=False)
    assert names_from_switches({}, have_datastore=False, have_draft_model=False)[0][-1] == "echo"
    assert drafter_switches("context,echo", draft_model=False)[1] == ["context", "echo"]
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    assert "context, model, recurrent, echo;" in " ".join(parser.format_help().split())
    with pytest.raises(ValueError, match="no builder for the drafter"):
        drafter_maker(["echo"])  # listed everywhere, but built by nobody: said at once, not at the first answer


def test_a_new_row_gets_its_switch_in_the_settings_dialog(echo, qtbot):
    from PySide6.QtWidgets import QCheckBox

    from draftscope.gui.dialogs.settings_tabs import DraftingTab

    tab = DraftingTab(learned="", recurrent="", model_spec=lambda: "default")
    qtbot.addWidget(tab)
    tab.show_settings(Settings(drafters={"context": True}))
    box = tab.findChild(QCheckBox, "drafterEcho")
    assert box.text() == "Echo (a test's drafter)" and box.isChecked(), "unnamed in the settings: its default"
    box.setChecked(False)
    assert tab.values()["drafters"]["echo"] is False
    # without a head the recurrent switch cannot be ticked, and what the settings hold stays
    assert not tab.findChild(QCheckBox, "drafterRecurrent").isEnabled()
    assert tab.values()["drafters"] == {
        "context": True,
        "retrieval": True,
        "learned": True,
        "model": False,
        "echo": False,
    }


def test_needs_are_said_in_one_wording():
    head = next(k for k in kinds() if k.needs is drafter_kinds.HEAD)
    assert head.off_note() is None, "no head yet is shown in the dialog, not said as a note"
    assert head.needs_message() == (
        "the recurrent drafter needs a head trained for this model "
        "(File ▸ Train the recurrent drafter… in the app, or draftscope drafter train)"
    )
    assert isinstance(head.needs, Need)
