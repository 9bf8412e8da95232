"""System-prompt presets: the app's built-in ones and the rule a user's own must follow (kept in
Settings.prompt_presets, name -> text). Plain Python: the settings file and the dialog share it."""

from __future__ import annotations

MAX_PRESETS = 100  # a picker past this many names is no longer a picker
MAX_PRESET_NAME = 80  # characters

# Name -> text, in the picker's order. "None" leaves the model's own default.
BUILTIN_PRESETS = {
    "None": "",
    "Concise assistant": "You are a helpful assistant. Answer briefly and directly; use a list only when "
    "it makes the answer clearer. Say so when you do not know.",
    "Code assistant": "You are an expert programmer. Answer with working code first, then a short "
    "explanation. Keep the user's language and style; point out bugs and edge cases.",
    "Summariser": "Summarise the text the user gives you: the main points first, in a few short "
    "bullet points, then one sentence on what matters most. Add nothing that is not in it.",
    "Translator": "Translate the user's text into English (or into the language they name), keeping its "
    "meaning, tone and formatting. Reply with the translation only.",
}


def preset_problem(name: object, text: object, *, max_text: int) -> str | None:
    """Why ``name`` -> ``text`` cannot be one of the user's presets (None when it can)."""
    if not isinstance(name, str) or not isinstance(text, str):
        return "a preset's name and text must be text"
    if not name.strip():
        return "a preset needs a name"
    if name != name.strip() or len(name) > MAX_PRESET_NAME:
        return f"a preset's name must be at most {MAX_PRESET_NAME} characters, without spaces around it"
    if name.casefold() in {b.casefold() for b in BUILTIN_PRESETS}:
        return f"{name!r} is a built-in preset: choose another name"
    if len(text) > max_text:
        return f"preset {name!r} is longer than {max_text:,} characters"
    return None
