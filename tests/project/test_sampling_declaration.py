"""Sampling declared once (issue 64): each tuned field of SamplingParams (rules.py) carries its
range, the app's default and its words, and the settings, the settings file and an answer's
sampling follow it by name: a setting per field with the declared default, kept in the file under
the field's own name, and a request's own values merged over the settings' by name."""

from __future__ import annotations

import json
import typing
from dataclasses import fields

import pytest

from draftscope.core.sampling_defaults import sampling_from
from draftscope.rules import SAMPLING_FIELDS, SamplingParams
from draftscope.storage import Settings, load_settings
from draftscope.storage.settings_file import save_settings

# a value in range and unlike the app's default, for every declared field
ASKED = {name: declared.range.high for name, declared in SAMPLING_FIELDS.items()}


def test_every_declared_field_is_a_setting_with_the_declared_default_and_its_kind():
    defaults = Settings()
    hints = typing.get_type_hints(SamplingParams)
    for name, declared in SAMPLING_FIELDS.items():
        assert getattr(defaults, name) == declared.default, name
        assert declared.whole == (hints[name] is int), f"{name}: a whole-number field's default is an int"
        assert declared.range.holds(declared.default), name
    assert not defaults.problems()


def test_a_field_s_own_default_changes_nothing():
    """SamplingParams() is plain greedy decoding, whatever the app's defaults are."""
    plain = SamplingParams()
    assert plain.greedy and not plain.penalised and plain.seed is None
    assert (plain.top_k, plain.top_p, plain.min_p) == (0, 1.0, 0.0)


def test_the_settings_file_keeps_each_field_under_its_own_name(tmp_path):
    settings = Settings(**ASKED)
    path = save_settings(settings, tmp_path / "settings.json")
    assert {name: json.loads(path.read_text())["sampling"][name] for name in ASKED} == ASKED
    loaded, notices = load_settings(path)
    assert notices == [] and loaded == settings


@pytest.mark.parametrize("name", list(SAMPLING_FIELDS))
def test_a_request_s_value_replaces_the_settings_by_name_and_only_that_one(name):
    settings = Settings(temperature=0.7)
    asked = sampling_from(settings, **{name: ASKED[name]})
    assert getattr(asked, name) == ASKED[name]
    for other in SAMPLING_FIELDS:
        if other != name:
            assert getattr(asked, other) == getattr(settings, other), other


def test_left_out_and_unknown_fields():
    settings = Settings(temperature=0.7, min_p=0.2)
    assert sampling_from(settings, min_p=None).min_p == 0.2, "None: not given"
    with pytest.raises(ValueError, match="unknown sampling field.*typical_p"):
        sampling_from(settings, typical_p=0.9)
    assert {f.name for f in fields(SamplingParams)} == {*SAMPLING_FIELDS, "seed"}
