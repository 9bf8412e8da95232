"""Light and dark themes, the application icon, and where the resources live.

A theme is the Fusion style, a matching :class:`QPalette` and a Qt style sheet
(``resources/styles/app.qss``, filled in with the theme's colours from
:mod:`draftscope.gui.palettes`). ``"system"`` follows the desktop's colour scheme and keeps
following it while the app runs. Other modules learn the effective theme from
``QApplication.instance().property("draftscopeTheme")`` or the return value of
:func:`apply_theme`.

The resources are found in three layouts (see :func:`resources_dir`):

* a source checkout or editable install: ``<repo>/resources``;
* an installed wheel: ``site-packages/resources`` (maturin's ``include`` in pyproject.toml puts the
  repository's ``resources/icons`` and ``resources/styles`` there, beside ``draftscope/``);
* a PyInstaller bundle: ``<bundle>/_internal/resources`` (``packaging/draftscope.spec``).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from string import Template

from pygments.styles import get_all_styles
from PySide6.QtCore import QDir, QSize, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

from draftscope.gui.palettes import qt_colours, style_colours

log = logging.getLogger(__name__)

THEMES = ("system", "light", "dark")
ICON_SIZES = (16, 32, 48, 64, 128, 256, 512)
ICON_NAME = "draftscope"
RESOURCES_ENV = "DRAFTSCOPE_RESOURCES_DIR"
SEARCH_PREFIX = "draftscope"  # the style sheets name images as url(draftscope:ui/...), see apply_theme

# Files every complete resources folder has: a folder named "resources" elsewhere in site-packages
# (another distribution's) must not be mistaken for ours.
_MARKERS = ("icons/draftscope.svg", "styles/app.qss")

# pygments styles for code blocks, best first; each list ends in a style every pygments has.
_CODE_STYLES = {
    "light": ("friendly", "default"),
    "dark": ("github-dark", "one-dark", "monokai"),
}

_state: dict[str, object] = {}  # requested theme and font size, for following the system scheme


# ---------------------------------------------------------------------------------- resources


def _candidates() -> list[Path]:
    here = Path(__file__).resolve()
    out = []
    override = os.environ.get(RESOURCES_ENV)
    if override:
        out.append(Path(override))
    # package data: draftscope/resources in a checkout (the repository's resources/ links here),
    # a wheel (site-packages/draftscope/resources) and a PyInstaller bundle (_internal/draftscope/)
    out.append(here.parents[1] / "resources")
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        out.append(Path(bundle) / "draftscope" / "resources")
    return out


def _is_resources(path: Path) -> bool:
    return all((path / marker).is_file() for marker in _MARKERS)


def resources_dir() -> Path:
    """The folder holding ``icons/`` and ``styles/``; ``DRAFTSCOPE_RESOURCES_DIR`` overrides it.

    Raises :class:`FileNotFoundError`, naming the places looked at, when no folder has them.
    """
    seen = []
    for path in _candidates():
        if path in seen:
            continue
        seen.append(path)
        if _is_resources(path):
            return path
    raise FileNotFoundError(
        "Draftscope's resources (icons, style sheets) were not found in: " + ", ".join(str(p) for p in seen)
    )


def style_sheet(theme: str) -> str:
    """The style sheet for "light" or "dark": ``styles/app.qss`` with the theme's palette."""
    if theme not in ("light", "dark"):
        raise ValueError(f"no style sheet for theme {theme!r}")
    text = (resources_dir() / "styles" / "app.qss").read_text(encoding="utf-8")
    return Template(text).substitute(style_colours(theme), theme=theme)


# -------------------------------------------------------------------------------------- icon


def app_icon() -> QIcon:
    """The application icon: the PNG sizes (``availableSizes()`` lists them), then the SVG.

    An empty QIcon when the resources are missing (the window then has the platform's default).
    """
    try:
        root = resources_dir() / "icons"
    except FileNotFoundError as exc:
        log.warning("%s", exc)
        return QIcon()
    icon = QIcon()
    for size in ICON_SIZES:
        png = root / "png" / f"{ICON_NAME}-{size}.png"
        if png.is_file():
            icon.addFile(str(png), QSize(size, size))
    svg = root / f"{ICON_NAME}.svg"
    if svg.is_file():  # after the PNGs, so the exact sizes above stay the ones listed
        icon.addFile(str(svg))
    return icon


# ------------------------------------------------------------------------------------- themes


def _color_scheme_dark() -> bool | None:
    """The desktop's scheme (Qt >= 6.5): True dark, False light, None when it does not say."""
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is None:
        return None
    value = scheme()
    if value == Qt.ColorScheme.Dark:
        return True
    if value == Qt.ColorScheme.Light:
        return False
    return None


def _system_is_dark(app: QApplication) -> bool:
    dark = _color_scheme_dark()
    if dark is not None:
        return dark
    # Older Qt or a platform without a scheme: the palette the platform gave the app, saved before
    # our first change (later the app palette is ours and says nothing about the system).
    palette = _state.get("system_palette") or app.palette()
    window, text = palette.color(QPalette.ColorRole.Window), palette.color(QPalette.ColorRole.WindowText)
    return window.lightnessF() < text.lightnessF()


def effective_theme(theme: str, app: QApplication | None = None) -> str:
    """ "light" or "dark": ``theme`` itself, or for "system" what the desktop uses."""
    if theme in ("light", "dark"):
        return theme
    if theme != "system":
        raise ValueError(f"theme must be one of {', '.join(THEMES)}, not {theme!r}")
    app = app or QApplication.instance()
    return "dark" if app is not None and _system_is_dark(app) else "light"


def _palette(theme: str) -> QPalette:
    R, G = QPalette.ColorRole, QPalette.ColorGroup
    c = qt_colours(theme)
    pal = QPalette()
    roles = {
        R.Window: c["window"],
        R.WindowText: c["text"],
        R.Base: c["base"],
        R.AlternateBase: c["alt"],
        R.Text: c["text"],
        R.Button: c["button"],
        R.ButtonText: c["text"],
        R.BrightText: c["bright"],
        R.Highlight: c["accent"],
        R.HighlightedText: c["accent_text"],
        R.Link: c["link"],
        R.LinkVisited: c["visited"],
        R.ToolTipBase: c["tip"],
        R.ToolTipText: c["tip_text"],
        R.PlaceholderText: c["placeholder"],
        R.Light: c["light"],
        R.Midlight: c["midlight"],
        R.Mid: c["mid"],
        R.Dark: c["dark"],
        R.Shadow: c["shadow"],
    }
    if hasattr(R, "Accent"):  # Qt >= 6.6
        roles[R.Accent] = c["accent"]
    for role, colour in roles.items():
        pal.setColor(role, QColor(colour))
    for role in (R.WindowText, R.Text, R.ButtonText, R.HighlightedText):
        pal.setColor(G.Disabled, role, QColor(c["disabled"]))
    pal.setColor(G.Disabled, R.Highlight, QColor(c["mid"]))
    pal.setColor(G.Disabled, R.Base, QColor(c["window"]))
    pal.setColor(G.Disabled, R.Button, QColor(c["window"]))
    return pal


def apply_theme(app: QApplication, theme: str, font_size: int) -> str:
    """Give ``app`` the Fusion style, the palette and style sheet of ``theme`` ("light", "dark" or
    "system"), and ``font_size`` points as its font; returns the effective theme, "light" or "dark".

    Safe to call again to switch themes or font size while the app runs. A missing style sheet is
    logged and leaves the palette-only look (still light or dark).
    """
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {', '.join(THEMES)}, not {theme!r}")
    if "system_palette" not in _state:
        _state["system_palette"] = QPalette(app.palette())
    _state.update(theme=theme, font_size=int(font_size))
    hints = QGuiApplication.styleHints()
    if hasattr(hints, "setColorScheme"):  # Qt >= 6.8: native parts (title bars, dialogs) follow
        wanted = {"light": Qt.ColorScheme.Light, "dark": Qt.ColorScheme.Dark}.get(theme, Qt.ColorScheme.Unknown)
        _state["busy"] = True  # setColorScheme may emit colorSchemeChanged right away
        try:
            hints.setColorScheme(wanted)
        finally:
            _state["busy"] = False
    effective = effective_theme(theme, app)

    # Once: with a style sheet set, app.style() is Qt's style sheet proxy, whose name() is empty.
    if _state.get("fusion_app") is not app and app.style().name().lower() != "fusion":
        style = QStyleFactory.create("Fusion")
        if style is not None:
            app.setStyle(style)
    _state["fusion_app"] = app
    app.setPalette(_palette(effective))
    font = app.font()
    font.setPointSize(max(6, min(48, int(font_size))))
    app.setFont(font)
    try:
        QDir.setSearchPaths(SEARCH_PREFIX, [str(resources_dir() / "icons")])
        qss = style_sheet(effective)
    except OSError as exc:
        log.warning("no style sheet for the %s theme: %s", effective, exc)
        qss = ""
    app.setStyleSheet(qss)
    app.setProperty("draftscopeTheme", effective)
    _follow_system(app)
    return effective


def _follow_system(app: QApplication) -> None:
    """Once per app: re-apply when the desktop's scheme changes while "system" is selected."""
    hints = QGuiApplication.styleHints()
    if _state.get("watching") is app or not hasattr(hints, "colorSchemeChanged"):
        return

    def changed(_scheme) -> None:
        current = QApplication.instance()
        if _state.get("busy") or _state.get("theme") != "system" or current is None:
            return
        if effective_theme("system", current) != current.property("draftscopeTheme"):
            apply_theme(current, "system", int(_state.get("font_size", current.font().pointSize())))

    hints.colorSchemeChanged.connect(changed)
    _state["watching"] = app


def code_style(theme: str) -> str:
    """A pygments style name for code blocks in ``theme`` ("system" is resolved first)."""
    effective = effective_theme(theme)
    available = set(get_all_styles())
    for name in _CODE_STYLES[effective]:
        if name in available:
            return name
    return "default"
