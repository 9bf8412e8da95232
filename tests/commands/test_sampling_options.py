"""The command line's sampling options are generated from SamplingParams' declaration (rules.py):
one per field, under the field's name, its help saying its default, its value checked against the
declared range, and set as the setting of the same name; a field declared tomorrow gets its option
with no other edit."""

from __future__ import annotations

import argparse

import pytest

from draftscope import rules
from draftscope.commands.model_options import add_model_arguments, settings_from_args
from draftscope.rules import SAMPLING_FIELDS, Range, SamplingField


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_model_arguments(p)
    return p


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def unwrapped(text: str) -> str:
    """Help text without its spaces: argparse wraps lines, at hyphens too ("--repetition-" "window")."""
    return "".join(text.split())


def test_the_help_lists_every_declared_field_with_its_default():
    shown = unwrapped(parser().format_help())
    for name, declared in SAMPLING_FIELDS.items():
        assert option(name) in shown, name
        assert unwrapped(f"{declared.what}, {declared.range.words()}") in shown, name
        assert unwrapped(f"default: {declared.default:g})") in shown, name


def test_each_option_sets_the_setting_of_its_name_and_one_left_out_is_the_settings_default():
    asked = {name: declared.range.high for name, declared in SAMPLING_FIELDS.items()}
    argv = [word for name, value in asked.items() for word in (option(name), str(value))]
    settings = settings_from_args(parser().parse_args(argv))
    assert {name: getattr(settings, name) for name in asked} == asked
    left_out = settings_from_args(parser().parse_args([]))
    assert {name: getattr(left_out, name) for name in asked} == rules.DEFAULT_SAMPLING


def test_a_value_out_of_the_declared_range_is_a_usage_error_naming_the_option(capsys):
    for name, declared in SAMPLING_FIELDS.items():
        with pytest.raises(SystemExit):
            parser().parse_args([option(name), str(declared.range.high * 2)])
        assert f"{option(name)}: must be {declared.range.words()}" in capsys.readouterr().err


def test_a_newly_declared_field_gets_its_option(monkeypatch):
    typical = SamplingField(Range(0.0, 1.0, open_low=True), 1.0, "Typical-p", "keep the typical tokens", "1 = off")
    monkeypatch.setitem(SAMPLING_FIELDS, "typical_p", typical)
    p = parser()
    assert unwrapped("keep the typical tokens, in (0, 1] (1 = off; default: 1)") in unwrapped(p.format_help())
    assert p.parse_args(["--typical-p", "0.9"]).typical_p == 0.9
    with pytest.raises(SystemExit):
        p.parse_args(["--typical-p", "0"])
