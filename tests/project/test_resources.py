"""Application resources: style sheets, themes, the icon, and the desktop/AppStream files."""

from __future__ import annotations

import configparser
import importlib.util
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PySide6.QtCore import QSize, Qt, qInstallMessageHandler
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QLabel,
    QLineEdit,
    QListWidget,
    QMainWindow,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from draftscope.gui import theme

ROOT = Path(__file__).resolve().parents[2]
APP_ID = "io.github.draftscope.Draftscope"
DESKTOP = ROOT / "packaging" / f"{APP_ID}.desktop"
METAINFO = ROOT / "packaging" / f"{APP_ID}.metainfo.xml"


def _make_icons_module():
    spec = importlib.util.spec_from_file_location("make_icons", ROOT / "scripts" / "make_icons.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def restore_app(qapp):
    """Put the shared QApplication's look back after a test changes it."""
    sheet, palette, font = qapp.styleSheet(), QPalette(qapp.palette()), qapp.font()
    prop = qapp.property("draftscopeTheme")
    yield qapp
    hints = qapp.styleHints()
    if hasattr(hints, "setColorScheme"):  # apply_theme asks the platform for light/dark on Qt >= 6.8
        hints.setColorScheme(Qt.ColorScheme.Unknown)
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setFont(font)
    qapp.setProperty("draftscopeTheme", prop)


@pytest.fixture
def qt_messages():
    messages: list[str] = []
    previous = qInstallMessageHandler(lambda _type, _context, text: messages.append(text))
    yield messages
    qInstallMessageHandler(previous)


def _every_styled_widget() -> QMainWindow:
    """A window holding each widget (and object name) the style sheets style."""
    window = QMainWindow()
    centre = QWidget()
    layout = QVBoxLayout(centre)
    conversations = QListWidget(objectName="conversationList")
    conversations.addItems(["first", "second"])
    conversations.setCurrentRow(0)
    layout.addWidget(conversations)
    layout.addWidget(QTextBrowser(objectName="chatView"))
    layout.addWidget(QPlainTextEdit(objectName="chatInput"))
    for name in ("sendButton", "stopButton", "newConversationButton", ""):
        layout.addWidget(QPushButton(name or "plain", objectName=name))
    combo = QComboBox()
    combo.addItems(["System", "Light", "Dark"])
    checked = QCheckBox("check")
    checked.setChecked(True)
    progress = QProgressBar()
    progress.setValue(40)
    tabs = QTabWidget()
    tabs.addTab(QLabel("one"), "One")
    tabs.addTab(QLabel("two"), "Two")
    for widget in (QLineEdit("text"), combo, QSpinBox(), QDoubleSpinBox(), checked, progress, tabs):
        layout.addWidget(widget)
    window.setCentralWidget(centre)
    window.menuBar().addMenu("&View").addAction("Dock")
    dock = QDockWidget("Accepted drafts", window, objectName="draftsDock")
    dock.setWidget(QLabel("drafts"))
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
    window.statusBar().addWidget(QLabel("model: x", objectName="statusModel"))
    window.statusBar().addPermanentWidget(QLabel("1 tokens/s", objectName="statusTokensPerSecond"))
    window.setToolTip("tip")
    return window


def _polish_everything(qapp, window: QMainWindow) -> None:
    window.show()
    menu = QMenu(window)
    menu.addAction("item")
    menu.ensurePolished()
    for widget in window.findChildren(QWidget):
        widget.ensurePolished()
    qapp.processEvents()
    window.grab()  # paint once: images named in the sheet are loaded while painting
    window.close()


# ----------------------------------------------------------------------------- style sheets


def test_the_message_handler_sees_a_broken_style_sheet(qapp, restore_app, qt_messages):
    """The parse checks below would pass vacuously if Qt's warning never reached the handler."""
    qapp.setStyleSheet("QPushButton { color: ")
    _polish_everything(qapp, _every_styled_widget())
    assert any("Could not parse" in m for m in qt_messages), qt_messages


@pytest.mark.parametrize("name", ["light", "dark"])
def test_style_sheet_parses_without_warnings(qapp, restore_app, qt_messages, name):
    text = theme.style_sheet(name)
    rules = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    assert text.count("{") == text.count("}") and "$" not in rules, "every colour of the template is filled in"
    theme.apply_theme(qapp, name, 11)
    assert qapp.styleSheet() == text
    _polish_everything(qapp, _every_styled_widget())
    problems = [m for m in qt_messages if "Could not parse" in m or "stylesheet" in m.lower()]
    assert not problems, problems


@pytest.mark.parametrize("name", ["light", "dark"])
def test_images_named_by_the_style_sheets_exist(name):
    text = re.sub(r"/\*.*?\*/", "", theme.style_sheet(name), flags=re.S)  # comments mention url(...) too
    urls = re.findall(r"url\(([^)]*)\)", text)
    assert urls, "the sheets draw combo/spin arrows and check marks with images"
    for url in urls:
        prefix, _, rel = url.strip("'\"").partition(":")
        assert prefix == theme.SEARCH_PREFIX, url
        assert (theme.resources_dir() / "icons" / rel).is_file(), url


def test_style_sheets_leave_the_font_size_to_the_settings():
    for name in ("light", "dark"):
        assert "font-size" not in theme.style_sheet(name)


# ----------------------------------------------------------------------------------- themes


def _window_lightness(qapp) -> float:
    return qapp.palette().color(QPalette.ColorRole.Window).lightnessF()


def test_apply_theme_switches_light_dark_light(qapp, restore_app):
    assert theme.apply_theme(qapp, "light", 11) == "light"
    light_window = qapp.palette().color(QPalette.ColorRole.Window)
    light_sheet = qapp.styleSheet()
    assert qapp.property("draftscopeTheme") == "light"
    assert qapp.font().pointSize() == 11

    assert theme.apply_theme(qapp, "dark", 14) == "dark"
    dark_window = qapp.palette().color(QPalette.ColorRole.Window)
    assert dark_window.lightnessF() < light_window.lightnessF() - 0.5
    assert qapp.palette().color(QPalette.ColorRole.Text).lightnessF() > 0.8
    assert qapp.styleSheet() != light_sheet and "#1c1d21" in qapp.styleSheet()
    assert qapp.property("draftscopeTheme") == "dark"
    assert qapp.font().pointSize() == 14

    assert theme.apply_theme(qapp, "light", 11) == "light"
    assert qapp.palette().color(QPalette.ColorRole.Window) == light_window
    assert qapp.styleSheet() == light_sheet
    assert qapp.font().pointSize() == 11


def test_widgets_follow_a_theme_switch(qapp, restore_app):
    theme.apply_theme(qapp, "light", 11)
    window = _every_styled_widget()
    window.show()
    qapp.processEvents()
    chat = window.findChild(QTextBrowser, "chatView")
    light = chat.palette().color(QPalette.ColorRole.Window).lightnessF()
    theme.apply_theme(qapp, "dark", 11)
    qapp.processEvents()
    assert window.palette().color(QPalette.ColorRole.Window).lightnessF() < light
    window.close()


def test_fusion_style_and_font_size_limits(qapp, restore_app):
    theme.apply_theme(qapp, "dark", 200)
    assert qapp.font().pointSize() == 48
    theme.apply_theme(qapp, "light", 1)
    assert qapp.font().pointSize() == 6
    qapp.setStyleSheet("")  # with a sheet set, app.style() is Qt's style sheet proxy
    assert qapp.style().name().lower() == "fusion"


def test_system_theme_resolves_to_light_or_dark(qapp, restore_app):
    effective = theme.apply_theme(qapp, "system", 11)
    assert effective in ("light", "dark")
    assert theme.effective_theme("system", qapp) == effective
    assert (_window_lightness(qapp) < 0.5) == (effective == "dark")
    theme.apply_theme(qapp, "light", 11)  # stop following the system for the tests after this one


def test_unknown_theme_is_refused(qapp, restore_app):
    with pytest.raises(ValueError):
        theme.apply_theme(qapp, "solarized", 11)


def test_code_styles_exist_and_suit_the_theme():
    from pygments.styles import get_style_by_name

    light, dark = theme.code_style("light"), theme.code_style("dark")
    assert light != dark
    assert QColor(get_style_by_name(light).background_color).lightnessF() > 0.8
    assert QColor(get_style_by_name(dark).background_color).lightnessF() < 0.3


# ------------------------------------------------------------------------------ resources dir


def test_resources_dir_in_the_checkout():
    """The files are package data (draftscope/resources); the repository's resources/ links there."""
    assert theme.resources_dir() == ROOT / "app" / "draftscope" / "resources"
    assert (ROOT / "resources").resolve() == theme.resources_dir().resolve()


def test_resources_dir_in_an_installed_wheel(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    (site / "draftscope" / "gui").mkdir(parents=True)
    shutil.copytree(ROOT / "resources" / "icons", site / "draftscope" / "resources" / "icons")
    shutil.copytree(ROOT / "resources" / "styles", site / "draftscope" / "resources" / "styles")
    monkeypatch.setattr(theme, "__file__", str(site / "draftscope" / "gui" / "theme.py"))
    monkeypatch.delenv(theme.RESOURCES_ENV, raising=False)
    monkeypatch.delattr(sys, "_MEIPASS", raising=False)
    assert theme.resources_dir() == site / "draftscope" / "resources"


def test_missing_resources_name_the_places_looked_at(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    (site / "draftscope" / "gui").mkdir(parents=True)
    monkeypatch.setattr(theme, "__file__", str(site / "draftscope" / "gui" / "theme.py"))
    monkeypatch.delenv(theme.RESOURCES_ENV, raising=False)
    monkeypatch.delattr(sys, "_MEIPASS", raising=False)
    with pytest.raises(FileNotFoundError, match="not found in: .*site-packages/draftscope/resources"):
        theme.resources_dir()


def test_resources_dir_in_a_pyinstaller_bundle(tmp_path, monkeypatch):
    internal = tmp_path / "draftscope" / "_internal"
    (internal / "draftscope" / "gui").mkdir(parents=True)
    shutil.copytree(ROOT / "resources" / "icons", internal / "draftscope" / "resources" / "icons")
    shutil.copytree(ROOT / "resources" / "styles", internal / "draftscope" / "resources" / "styles")
    monkeypatch.setattr(sys, "_MEIPASS", str(internal), raising=False)
    monkeypatch.setattr(theme, "__file__", str(tmp_path / "elsewhere" / "draftscope" / "gui" / "theme.py"))
    monkeypatch.delenv(theme.RESOURCES_ENV, raising=False)
    assert theme.resources_dir() == internal / "draftscope" / "resources"


# --------------------------------------------------------------------------------------- icon


def test_app_icon_has_every_size(qapp):
    icon = theme.app_icon()
    assert not icon.isNull()
    assert sorted(s.width() for s in icon.availableSizes()) == list(theme.ICON_SIZES)
    assert all(s.width() == s.height() for s in icon.availableSizes())
    assert icon.pixmap(QSize(24, 24)).size() == QSize(24, 24)


@pytest.mark.parametrize("size", theme.ICON_SIZES)
def test_png_exists_and_matches_the_svg(qapp, size):
    make_icons = _make_icons_module()
    assert tuple(make_icons.SIZES) == theme.ICON_SIZES
    png = QImage(str(ROOT / "resources" / "icons" / "png" / f"draftscope-{size}.png"))
    assert not png.isNull()
    assert (png.width(), png.height()) == (size, size)
    assert png.hasAlphaChannel() and png.pixelColor(0, 0).alpha() == 0  # transparent corner

    rendered = make_icons.render(ROOT / "resources" / "icons" / "draftscope.svg", size)
    assert (rendered.width(), rendered.height()) == (size, size)
    # the committed PNG is the SVG's current rendering (small differences between Qt versions allowed)
    png = png.convertToFormat(QImage.Format.Format_ARGB32)
    step = max(1, size // 64)
    diffs = []
    for y in range(0, size, step):
        for x in range(0, size, step):
            a, b = png.pixelColor(x, y), rendered.pixelColor(x, y)
            diffs.append(
                abs(a.red() - b.red())
                + abs(a.green() - b.green())
                + abs(a.blue() - b.blue())
                + abs(a.alpha() - b.alpha())
            )
    assert sum(diffs) / len(diffs) < 8, "resources/icons/png is stale: run python scripts/make_icons.py"


# -------------------------------------------------------------------------- desktop/AppStream


def _desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(DESKTOP, encoding="utf-8")
    return parser["Desktop Entry"]


def test_desktop_file_has_the_required_keys():
    entry = _desktop_entry()
    for key in ("Exec", "Icon", "Name", "Type"):
        assert entry.get(key), key
    assert entry["Type"] == "Application"
    assert entry["Exec"].split()[0] == "draftscope"
    assert entry["Icon"] == DESKTOP.stem == APP_ID
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";") and entry["Keywords"].endswith(";")


def test_metainfo_parses_and_matches_the_desktop_file():
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert root.findtext("id") == DESKTOP.stem
    assert METAINFO.name == f"{root.findtext('id')}.metainfo.xml"
    launchable = root.find("launchable")
    assert launchable.get("type") == "desktop-id" and launchable.text == DESKTOP.name
    assert root.findtext("provides/binary") == "draftscope"
    assert root.findtext("metadata_license") == "CC0-1.0"
    assert root.findtext("project_license") == "Apache-2.0"
    release = root.find("releases/release")
    assert (release.get("version"), release.get("date")) == ("0.1.0", "2026-11-21")
    assert root.find("content_rating") is not None
    image = root.findtext("screenshots/screenshot/image")
    assert image.endswith("docs/screenshots/main-window.png")
    assert (ROOT / "docs" / "screenshots" / "main-window.png").is_file()


def test_the_speedup_caption_stays_readable_across_theme_switches(qapp, restore_app):
    """Its text is drawn in the theme's colours after a live switch (a palette set on the label by
    hand came back as the old theme's once the new style sheet was applied: dark on dark)."""
    from draftscope.gui.panels.speedup import SpeedupPanel

    def caption_contrast(panel) -> float:
        image = panel.caption.grab().toImage()
        background = image.pixelColor(1, 1).lightnessF()
        return max(
            abs(image.pixelColor(x, y).lightnessF() - background)
            for x in range(0, image.width(), 2)
            for y in range(0, image.height(), 2)
        )

    theme.apply_theme(qapp, "light", 11)
    panel = SpeedupPanel()
    panel.resize(500, 400)
    panel.show()
    qapp.processEvents()
    for name in ("dark", "light", "dark"):
        theme.apply_theme(qapp, name, 11)
        qapp.processEvents()
        assert caption_contrast(panel) > 0.4, name
    panel.close()


@pytest.mark.parametrize("name", ["light", "dark"])
def test_an_error_label_takes_the_theme_s_error_colour_and_gives_it_back(qapp, restore_app, qtbot, name):
    from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

    from draftscope.gui.form_widgets import show_error
    from draftscope.gui.palettes import style_colours

    theme.apply_theme(qapp, name, 11)
    box = QWidget()
    qtbot.addWidget(box)
    layout = QVBoxLayout(box)
    error, plain = QLabel("██████"), QLabel("██████")
    layout.addWidget(error)
    layout.addWidget(plain)
    show_error(error)
    box.resize(200, 80)
    box.show()
    qapp.processEvents()

    def ink(label):
        return box.grab().toImage().pixelColor(label.geometry().x() + 4, label.geometry().center().y()).name()

    colours = style_colours(name)
    assert ink(error) == colours["error"] and ink(plain) == colours["text"]
    show_error(error, False)
    qapp.processEvents()
    assert ink(error) == colours["text"]
