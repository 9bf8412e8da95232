"""The light and dark palettes: the colours of the app's style sheet (``resources/styles/app.qss``,
a template naming them as ``${name}``) and of the Qt palette (``QT_ROLES``), in one place."""

from __future__ import annotations

from draftscope.drafter_kinds import kinds

# name: (light, dark)  what it colours
STYLE = {
    "text": ("#1f2328", "#e6e7ea"),  # the text
    "surface": ("#ffffff", "#24262b"),  # text areas, buttons, lists (the Qt palette's Base)
    "accent": ("#4f46e5", "#6366f1"),  # focus, default buttons, the send button
    "window": ("#f4f5f7", "#1c1d21"),  # windows and dialogs
    "separator": ("#e1e4e9", "#2e3036"),  # splitters, disabled borders
    "selected_text": ("#312e81", "#e0e7ff"),  # the text of selected items
    "frame": ("#dfe2e7", "#34363d"),  # the chat's frame, dock titles, the status bar's edge
    "selected": ("#e0e7ff", "#2f3160"),  # selected items
    "selection": ("#c7d2fe", "#3f4290"),  # selected text
    "disabled_text": ("#a0a5ad", "#62666f"),  # disabled buttons and fields
    "secondary_text": ("#4b5260", "#a3a9b3"),  # the status bar, tabs
    "muted": ("#8a9099", "#6b7079"),  # disabled labels, placeholders
    "sidebar": ("#eceef2", "#18191c"),  # the conversation list, dock titles, the status bar
    "selection_text": ("#1e1b4b", "#ffffff"),  # selected text
    "input_border": ("#cfd3da", "#41444c"),  # fields and buttons
    "pressed": ("#e7e9ed", "#33363c"),  # pressed buttons, progress bars
    "border": ("#d5d8de", "#3a3d44"),  # menus, popups
    "hover": ("#e2e5eb", "#26282d"),  # items under the mouse
    "accent_hover": ("#4338ca", "#7376f4"),
    "accent_pressed": ("#3730a3", "#4f46e5"),
    "accent_disabled": ("#c7c9f5", "#34365a"),
    "check_disabled": ("#e1e4e9", "#34363d"),  # disabled check boxes
    "scroll_handle": ("#c4c8cf", "#4a4d55"),
    "selected_inactive": ("#e4e6f5", "#292b45"),  # a selection in an inactive window
    "button_hover": ("#f3f4f6", "#2d2f35"),
    "button_hover_border": ("#b9bec7", "#50545d"),
    "accent_focus_ring": ("#312e81", "#a5b4fc"),
    "accent_disabled_text": ("#f5f5ff", "#7d80a8"),
    "danger": ("#b42318", "#f97066"),  # the stop button
    "error": ("#c62828", "#f97066"),  # what went wrong, said in a label (widgets.show_error)
    "danger_border": ("#f1b8b2", "#7a2e2a"),
    "danger_hover": ("#fef3f2", "#3a2022"),
    "danger_hover_border": ("#e48b82", "#a23b34"),
    "danger_pressed": ("#fde4e1", "#4a2426"),
    "spin_hover": ("#eef0f3", "#30333a"),  # spin box arrows
    "check_border": ("#b9bec7", "#5d616a"),
    "check_hover": ("#4f46e5", "#7376f4"),
    "live_figure": ("#4338ca", "#a5b4fc"),  # the live tokens/s in the status bar
    "alternate": ("#f6f7f9", "#282a2f"),  # alternate rows
    "scroll_hover": ("#a3a8b0", "#5d616a"),
    "tooltip": ("#1f2328", "#2d2f35"),
    "tooltip_text": ("#ffffff", "#e6e7ea"),
    "tooltip_border": ("#1f2328", "#41444c"),
}

# The Qt palette's colours (theme._palette turns them into roles): name: (light, dark)
QT = {
    "window": ("#f4f5f7", "#1c1d21"),
    "text": ("#1f2328", "#e6e7ea"),
    "base": ("#ffffff", "#24262b"),
    "alt": ("#f6f7f9", "#2a2c32"),
    "button": ("#ffffff", "#2d2f35"),
    "accent": ("#4f46e5", "#6366f1"),
    "accent_text": ("#ffffff", "#ffffff"),
    "link": ("#4338ca", "#a5b4fc"),
    "visited": ("#6d28d9", "#c4b5fd"),
    "tip": ("#1f2328", "#2d2f35"),
    "tip_text": ("#ffffff", "#e6e7ea"),
    "placeholder": ("#8a9099", "#7d828c"),
    "disabled": ("#a0a5ad", "#6b7079"),
    "light": ("#ffffff", "#3a3d44"),
    "midlight": ("#eceef1", "#33363c"),
    "mid": ("#c9cdd3", "#2b2d33"),
    "dark": ("#a3a8b0", "#141518"),
    "shadow": ("#6b7079", "#0b0c0e"),
    "bright": ("#ffffff", "#ffffff"),
}


def style_colours(theme: str) -> dict[str, str]:
    """The style sheet's colours for "light" or "dark"."""
    i = ("light", "dark").index(theme)
    return {name: pair[i] for name, pair in STYLE.items()}


def qt_colours(theme: str) -> dict[str, str]:
    """The Qt palette's colours for "light" or "dark"."""
    i = ("light", "dark").index(theme)
    return {name: pair[i] for name, pair in QT.items()}


# Colours drawn by hand (charts, the tree, rendered text), per theme.
# Where each token of an answer came from (the chat's "colour drafted tokens" view, the panels).
PROVENANCE_COLOURS = {
    "light": {
        "retrieval": "#cfe3ff",
        "context": "#d3f5d3",
        "model": "#ead9ff",
        "recurrent": "#ffe2c4",
        "learned": "#fff3b0",
    },
    "dark": {
        "retrieval": "#1f3a5f",
        "context": "#1f4a2a",
        "model": "#3d2a5c",
        "recurrent": "#5a3a1a",
        "learned": "#4d4418",
    },
}


def drafter_colours(theme: str) -> dict[str, str]:
    """Each drafter kind's colour for "light" or "dark", in the kinds' order (one without a colour
    is left uncoloured; tests/test_drafter_kinds.py fails on it)."""
    colours = PROVENANCE_COLOURS[theme]
    return {k.name: colours[k.name] for k in kinds() if k.name in colours}


# The speed-up chart's series: apart from each other and readable on either background.
CHART_COLOURS = {
    "light": dict(rate="#4f46e5", baseline="#6b7280", tau="#f59e0b", tau_mean="#b45309", marker="#dc2626"),
    "dark": dict(rate="#a5b4fc", baseline="#9ca3af", tau="#fbbf24", tau_mean="#fde68a", marker="#f87171"),
}
TREE_STOP_COLOURS = {"light": "#e8590c", "dark": "#ff922b"}  # where verification stopped: orange reads on both
# Code blocks: the background where the highlighting style names none, and the language label.
CODE_BACKGROUND = {"light": "#f6f8fa", "dark": "#1e1e1e"}
CODE_LABEL = {"light": "#6a737d", "dark": "#9aa4b2"}
# The transcript's tool call cards (gui/chat/tool_cards.py): name: (light, dark)
TOOL_CARD_COLOURS = {
    "card": ("#f7f7fb", "#262830"),  # the card's background
    "border": ("#d5d8de", "#3a3d44"),
    "muted": ("#6b7079", "#a3a9b3"),  # "Tool call", the server's name, notes
    "waiting": ("#b45309", "#fbbf24"),  # waits for the user, or runs
    "good": ("#15803d", "#4ade80"),  # done
    "bad": ("#c62828", "#f97066"),  # failed, timed out, the tool's error
}
