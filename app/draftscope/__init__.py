"""Draftscope: a desktop chat app that answers fast through speculative decoding, and shows how."""

__version__ = "0.1.0"
