"""The window fits the screen and keeps its shape (issue 62): the Settings dialog, the first-run dialog
(both pages), the datastore wizard, the race and the train-head dialogs no taller than the screen with
their buttons on it, the main window no wider than a 1280-pixel screen with every panel open and a
message being edited, and the window's size, panels, colouring and conversation kept across a reload
and a restart. Offscreen Qt (an 800x800 screen), the launcher's own paths, a tiny real model."""

from __future__ import annotations

import dataclasses
import gc
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from PySide6.QtCore import QByteArray, QRect
from PySide6.QtWidgets import QApplication, QPushButton
from runtime_helpers import CONTEXT_ONLY, runtime_for

from draftscope.gui import window_memory
from draftscope.storage import HistoryStore, Settings, load_settings

pytestmark = pytest.mark.usefixtures("own_data_and_cache")


def window_engine(tokenizer):
    from draftscope.engine.engine import Engine

    return Engine(tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, max_positions=4096), tokenizer, name="tiny")


WIDE_SCREEN = 1280  # px: the narrowest screen the window is meant for (1280x800, 1366x768)


@pytest.fixture
def app_font(qapp):
    """The app's default text size, as its theme sets it (the tests run without the theme)."""
    before = QApplication.font()
    font = QApplication.font()
    font.setPointSize(Settings().font_size)
    QApplication.setFont(font)
    yield
    QApplication.setFont(before)


@pytest.mark.usefixtures("app_font")
def test_the_settings_dialog_is_no_taller_than_the_screen_and_ok_is_on_it(qtbot):
    """Its pages were 976 px tall: on an 800-pixel screen OK and Cancel were below the bottom."""
    from draftscope.gui.dialogs.settings_dialog import SettingsDialog

    dialog = SettingsDialog(Settings(), devices=["cpu"])
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert_fits(dialog, "okButton")


def assert_fits(dialog, *buttons: str) -> None:
    """``dialog`` (shown) within its screen (offscreen Qt's: 800 px high), and each named button
    visible on it."""
    QApplication.processEvents()
    screen, frame = dialog.screen().availableGeometry(), dialog.frameGeometry()
    assert screen.height() <= 800, screen
    assert frame.height() <= screen.height(), (dialog.objectName(), frame, screen)
    assert screen.contains(frame.topLeft()), (dialog.objectName(), frame)
    for name in buttons:
        button = dialog.findChild(QPushButton, name)
        assert button is not None and button.isVisible(), name
        on_screen = QRect(button.mapToGlobal(button.rect().topLeft()), button.size())
        assert screen.contains(on_screen), (dialog.objectName(), name, on_screen, screen)


def shown(qtbot, dialog):
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    return dialog


@pytest.mark.usefixtures("app_font")
def test_the_first_run_dialog_fits_an_800_pixel_screen_on_both_pages(qtbot, tmp_path):
    from draftscope.gui.dialogs.first_run import FirstRunDialog

    dialog = shown(qtbot, FirstRunDialog(Settings(), settings_file=tmp_path / "settings.json"))
    assert_fits(dialog, "continueButton", "quitSetupButton")
    dialog._show_page(1)  # the datastore page, as Continue shows it once a model is chosen
    assert_fits(dialog, "backButton", "finishButton", "buildDatastoreButton")


@pytest.mark.usefixtures("app_font")
def test_the_datastore_wizard_fits_an_800_pixel_screen(qtbot, tokenizer, tmp_path):
    from PySide6.QtWidgets import QWizard

    from draftscope.gui.wizard.wizard import DatastoreWizard

    (tmp_path / "notes.md").write_text("# Notes\n\nSome text to build a datastore from.\n")
    wizard = shown(
        qtbot,
        DatastoreWizard(
            "tiny-test-model",
            sources=[str(tmp_path / "notes.md")],
            tokenizer_loader=lambda spec: tokenizer,
            out_dir=tmp_path / "out",
        ),
    )
    for name, which in (("next", QWizard.WizardButton.NextButton), ("close", QWizard.WizardButton.CancelButton)):
        wizard.button(which).setObjectName(f"wizard_{name}")
    assert_fits(wizard, "wizard_next", "wizard_close")
    wizard.next()  # the options page: the tallest form
    assert wizard.currentPage() is wizard.options_page
    assert_fits(wizard, "wizard_next", "wizard_close")


@pytest.mark.usefixtures("app_font")
def test_the_race_dialog_and_train_head_fit_an_800_pixel_screen(qtbot, tokenizer):
    from draftscope.gui.dialogs.race import RaceDialog
    from draftscope.gui.dialogs.train_head import TrainHeadDialog

    engine = window_engine(tokenizer)
    race = shown(qtbot, RaceDialog(runtime_for(engine)))
    assert_fits(race, "raceButton")
    train = shown(qtbot, TrainHeadDialog(engine, "tiny"))
    assert_fits(train, "trainStart", "trainClose")


def make_launcher(tokenizer, tmp_path, settings=None):
    from draftscope.gui.launcher import Launcher

    def factory(settings, log=None):
        return runtime_for(window_engine(tokenizer), settings)

    settings = settings or Settings(model="tiny-a", drafters=dict(CONTEXT_ONLY), read_ahead=False)
    history = HistoryStore(tmp_path / "h.sqlite3")
    return Launcher(factory, history, settings, settings_file=tmp_path / "settings.json")


def start(qtbot, launcher):
    with qtbot.waitSignal(launcher.window_ready, timeout=30_000) as ready:
        launcher.start()
    return ready.args[0]


def shape_the_window(window):
    """Two conversations, the older one shown; a panel open; colouring on; a size of the user's."""
    first = window.history.create_conversation("first")
    window.history.add_message(first, "user", "Hello from the first conversation")
    second = window.history.create_conversation("second")
    window.history.add_message(second, "user", "Hello from the second")
    window.conversations.reload()
    window.show_conversation(first)
    window.docks["draftsDock"].show()  # offscreen's screen is 800 px wide: a side panel would not fit
    window.provenance_action.setChecked(True)
    window.resize(760, 600)
    QApplication.processEvents()
    return first


def shape_of(window) -> dict:
    return {
        "size": window.size().toTuple(),
        "docks": sorted(d.objectName() for d in [*window.docks.values(), window.documents_dock] if d.isVisible()),
        "colour": window.provenance_action.isChecked(),
        "conversation": window.conversation_id,
        "shown": "Hello from the first conversation" in window.chat_view.toPlainText(),
    }


SHAPED = {
    "docks": ["draftsDock"],
    "colour": True,
    "shown": True,
}


def test_a_reload_keeps_the_panels_colouring_conversation_and_size(qtbot, tokenizer, tmp_path):
    """A model switch rebuilt the window with its panels closed and colouring off; its progress
    showed under the window."""
    launcher = make_launcher(tokenizer, tmp_path)
    try:
        window = start(qtbot, launcher)
        first = shape_the_window(window)
        before = shape_of(window)
        assert before == {**SHAPED, "size": (760, 600), "conversation": first}
        with qtbot.waitSignal(launcher.window_ready, timeout=30_000) as ready:
            window.model_chosen.emit("tiny-b")
            assert launcher.progress.isVisible() and launcher.progress.parentWidget() is window, "shown over it"
        again = ready.args[0]
        assert again is not window and again.runtime.settings.model == "tiny-b"
        assert shape_of(again) == before
        assert launcher.progress.parentWidget() is None, "not deleted with the window it was shown over"
    finally:
        close(launcher)


def test_a_restart_restores_the_size_panels_colouring_and_conversation(qtbot, tokenizer, tmp_path):
    launcher = make_launcher(tokenizer, tmp_path)
    try:
        window = start(qtbot, launcher)
        first = shape_the_window(window)
        before = shape_of(window)
        window.close()  # as quitting does: the shape is saved then
    finally:
        close(launcher)
    saved, _ = load_settings(tmp_path / "settings.json")
    assert saved.colour_drafts and saved.last_conversation == first and saved.window_layout
    second = make_launcher(tokenizer, tmp_path, saved)
    try:
        again = start(qtbot, second)
        assert shape_of(again) == before
    finally:
        close(second)


def test_a_place_off_every_screen_is_not_restored_the_window_is_centred(qtbot, tokenizer, tmp_path):
    launcher = make_launcher(tokenizer, tmp_path)
    try:
        window = start(qtbot, launcher)
        screen = window.screen().availableGeometry()
        window.resize(760, 400)
        window.move(screen.right() + 3000, screen.bottom() + 3000)  # a second screen, since unplugged
        settings = Settings()
        window_memory.remember(window, settings)
        assert window_memory.saved_frame(window_memory._bytes(settings.window_geometry)) is not None
        window_memory.restore(window, settings)
        frame = window.frameGeometry()
        assert screen.contains(frame), (frame, screen)
        assert (frame.center() - screen.center()).manhattanLength() <= 4, "centred"
        assert window_memory.saved_frame(QByteArray(b"not a geometry")) is None
        settings.window_geometry = "%%% not base64"  # a hand-edited file: the default, no error
        window_memory.restore(window, settings)
        assert screen.contains(window.frameGeometry())
    finally:
        close(launcher)


@pytest.mark.usefixtures("app_font")
def test_every_panel_and_an_edit_keep_the_window_within_a_1280_pixel_screen(qtbot, tokenizer, tmp_path):
    """Opening the documents (1,329 px) or editing a message (1,449 px) widened the window past the screen."""
    launcher = make_launcher(tokenizer, tmp_path)
    try:
        window = start(qtbot, launcher)
        shape_the_window(window)
        window.show_panels()
        window.documents_dock.show()
        window.edit_last()
        assert window.editing_message_id is not None
        QApplication.processEvents()
        assert window.minimumSizeHint().width() <= WIDE_SCREEN - 20, window.minimumSizeHint()
        assert window.width() <= WIDE_SCREEN - 20, window.size()
    finally:
        close(launcher)


def close(launcher) -> None:
    if launcher.window is not None:
        launcher.window.close()
    launcher.progress.hide()
    gc.unfreeze()  # the loader froze what was alive; the next tests collect as usual


def test_the_settings_dialog_keeps_what_the_app_remembers(qtbot):
    """OK in Settings must not forget the recent models or the window's shape (the form does not show them)."""
    from draftscope.gui.dialogs.settings_dialog import SettingsDialog

    remembered = Settings(recent_models=["a", "b"], window_layout="AAAA", colour_drafts=True, last_conversation=4)
    dialog = SettingsDialog(remembered, devices=["cpu"])
    qtbot.addWidget(dialog)
    kept = dialog.result_settings()
    assert dataclasses.astuple(kept) == dataclasses.astuple(remembered)
