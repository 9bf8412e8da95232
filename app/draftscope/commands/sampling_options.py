"""The sampling options, generated from SamplingParams' declaration (rules.py): one per tuned field,
named as the field (``--top-p``), checked against its declared range, its help saying what it
does, its range, the value that turns it off and its default. An option left out is None, so the
caller's defaults apply (the settings', or the model's recommendation: commands/model_options.py)."""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping

from draftscope.core import argtypes
from draftscope.rules import SAMPLING_FIELDS, SamplingField


def add_sampling_options(
    p: argparse.ArgumentParser, defaults: Mapping[str, float] | None = None, *, leave_out: Collection[str] = ()
) -> None:
    """An option for each tuned field but ``leave_out``; its help names ``defaults``' value for it
    (None: the app's, as the settings have it)."""
    for name, declared in SAMPLING_FIELDS.items():
        if name in leave_out:
            continue
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=argtypes.sampling(name),
            default=None,
            metavar=declared.unit.upper() or None,
            help=option_help(declared, declared.default if defaults is None else defaults[name]),
        )


def option_help(declared: SamplingField, default: float) -> str:
    """An option's help, e.g. top-k's: sample only from the K most likely tokens, between 0 and
    1,000,000 (0 = off; default: 40)."""
    off = f"{declared.off}; " if declared.off else ""
    return f"{declared.what}, {declared.range.words()} ({off}default: {default:g})"


def given_sampling(args: argparse.Namespace) -> dict:
    """The sampling options given on the command line, by the fields' (and the settings') names."""
    values = {name: getattr(args, name, None) for name in SAMPLING_FIELDS}
    return {name: value for name, value in values.items() if value is not None}
