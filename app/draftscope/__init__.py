"""Draftscope: a desktop chat app that answers fast through speculative decoding, and shows how."""

from draftscope.optional_torch import quiet_transformers

__version__ = "0.1.0"

quiet_transformers()
