"""The app on a real X server (Xvfb, Qt's xcb platform) rather than offscreen: the main window
shows and a screenshot of it from the X server is not blank; and when the xcb plugin's system
libraries are missing, the app names them and exits 2 instead of Qt's abort."""

import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from x_server import app_env, xvfb_display

from draftscope.gui import platform_check

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb platform is Linux-only")


@pytest.fixture
def xvfb():
    """A virtual X server with a 1280x800 screen (x_server.py)."""
    with xvfb_display("1280x800") as display:
        yield display


def test_the_app_shows_its_window_on_an_x_server(xvfb, tmp_path, tokenizer_dir, tokenizer):
    from engine_fixtures import tiny_llama

    model_dir = tmp_path / "tiny-model"
    shutil.copytree(tokenizer_dir, model_dir)
    tiny_llama(len(tokenizer), seed=1).save_pretrained(model_dir)
    shot = tmp_path / "shot.png"
    # xcb explicitly: conftest makes offscreen the default for the test process and its children
    env = app_env(tmp_path, DISPLAY=xvfb, QT_QPA_PLATFORM="xcb")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "draftscope",
            "gui",
            "--model",
            str(model_dir),
            "--quit-after",
            "3000",
            "--screenshot",
            str(shot),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "main window shown (model tiny-model" in run.stdout
    assert f"screenshot saved to {shot}" in run.stdout
    assert shot.is_file()

    from PySide6.QtGui import QImage

    image = QImage(str(shot))
    assert not image.isNull() and image.width() >= 400 and image.height() >= 300, image.size()
    samples = Counter(image.pixel(x, y) for x in range(0, image.width(), 5) for y in range(0, image.height(), 5))
    assert len(samples) > 20, f"only {len(samples)} colours: a blank or flat screenshot"
    assert samples.most_common(1)[0][1] < 0.98 * sum(samples.values()), "one colour almost everywhere: blank"


FAKE_LDD = "\tlibxcb-cursor.so.0 => not found\n\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)\n"


@linux_only
def test_the_check_names_a_missing_library_and_its_package(monkeypatch):
    if platform_check.xcb_plugin() is None:
        pytest.skip("this PySide6 has no xcb platform plugin")
    monkeypatch.setattr(platform_check, "_run_ldd", lambda path: FAKE_LDD + FAKE_LDD)
    env = {"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}
    assert platform_check.missing_xcb_libraries(env) == ["libxcb-cursor.so.0"]
    message = platform_check.xcb_problem(env)
    assert "missing libxcb-cursor.so.0 (Debian/Ubuntu package libxcb-cursor0)" in message
    assert "sudo apt-get install libxcb-cursor0`" in message and "scripts/setup.sh" in message
    assert platform_check.xcb_problem({"DISPLAY": ":0"}) == message, "QT_QPA_PLATFORM unset: xcb on X11"


@linux_only
def test_the_check_stays_out_of_the_way(monkeypatch, tmp_path):
    """No X display, another platform, a Wayland session: ldd is not even run. No ldd: no problem."""

    def no_ldd(path):
        raise AssertionError("ldd run although Qt will not use xcb")

    monkeypatch.setattr(platform_check, "_run_ldd", no_ldd)
    for env in (
        {},
        {"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"},
        {"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland"},
        {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"},
    ):
        assert platform_check.xcb_problem(env) is None, env
    monkeypatch.undo()
    monkeypatch.setenv("PATH", str(tmp_path))  # no ldd anywhere
    assert platform_check.missing_xcb_libraries({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}) == []


@linux_only
def test_missing_libraries_exit_2_with_their_names_not_a_qt_abort(tmp_path):
    """`draftscope gui` with an ldd (first on PATH) reporting libxcb-cursor.so.0 not found."""
    if platform_check.xcb_plugin() is None:
        pytest.skip("this PySide6 has no xcb platform plugin")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ldd = bin_dir / "ldd"
    ldd.write_text(f"#!/bin/sh\nprintf '{FAKE_LDD}'\n")
    ldd.chmod(0o755)
    env = app_env(tmp_path, DISPLAY=":99", QT_QPA_PLATFORM="xcb", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run(
        [sys.executable, "-m", "draftscope", "gui"], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "Qt cannot open a window on this X display: missing libxcb-cursor.so.0" in run.stderr
    assert "sudo apt-get install libxcb-cursor0" in run.stderr
    assert "platform plugin" not in run.stderr, "Qt was not started"


def test_a_screenshot_needs_quit_after(tmp_path, capsys):
    pytest.importorskip("PySide6")
    from draftscope.cli import main

    assert main(["gui", "--screenshot", str(tmp_path / "shot.png")]) == 2
    assert "--screenshot needs --quit-after" in capsys.readouterr().err


SWITCHES = r"""
import dataclasses, sys
from pathlib import Path
from PySide6.QtWidgets import QApplication
from transformers import AutoTokenizer
from engine_fixtures import tiny_llama
from draftscope.core.runtime import Runtime
from draftscope.engine.engine import Engine
from draftscope.gui.launcher import Launcher
from draftscope.storage import HistoryStore, Settings, load_settings

folder, settings_file = Path(sys.argv[1]), Path(sys.argv[2])
app = QApplication([])
tokenizer = AutoTokenizer.from_pretrained(folder)
engine = Engine(tiny_llama(len(tokenizer), seed=5), tokenizer, name="tiny")

def factory(settings, log=None):
    if settings.model.startswith("broken"):
        raise FileNotFoundError(f"{settings.model}: no such model")
    return Runtime(settings, engine)

def wait(condition, what, seconds=30):
    import time
    deadline = time.monotonic() + seconds
    while not condition():
        app.processEvents()
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")

launcher = Launcher(factory, HistoryStore(folder / "h.sqlite3"), Settings(model="good"), settings_file=settings_file)
launcher.start()
wait(lambda: launcher.window is not None and launcher.window.isVisible(), "the window")
window = launcher.window
for step in ("settings", "switcher"):
    launcher.error_box = None
    if step == "settings":  # Settings > Model: another model that fails to open
        launcher.apply_settings(dataclasses.replace(launcher.settings, model="broken-1"))
    else:  # the model switcher above the chat
        window.model_chosen.emit("broken-2")
    wait(lambda: launcher.error_box is not None and launcher.error_box.isVisible(), f"the {step} switch's error")
    assert launcher.window is window and window.isVisible(), "the running window was replaced"
    assert load_settings(settings_file)[0].model == "good", "the settings file names a model that failed"
    print(f"{step}: {launcher.error_box.text().splitlines()[0]}", flush=True)
launcher.error_box.findChild(type(launcher.error_box.buttons()[0]), "keepCurrentModel").click()
launcher.apply_settings(dataclasses.replace(launcher.settings, theme="dark"))  # any Settings change after it
for _ in range(200):
    app.processEvents()
print("alive, running", window.runtime.settings.model, "settings file", load_settings(settings_file)[0].model,
      "theme", load_settings(settings_file)[0].theme, flush=True)
window.close()  # as quitting does: the window ends its answer worker
app.processEvents()
"""


@linux_only
def test_a_failed_switch_then_another_then_a_settings_change_leave_the_app_running(xvfb, tmp_path, tokenizer_dir):
    """A failed model switch left its loader thread running, and the next switch dropped it: Qt
    aborted the app (SIGABRT). And the failed model was saved in the settings file first. On a
    real window, in a child process: two failed switches (Settings, then the switcher), then Keep
    the current model and a theme change."""
    script = tmp_path / "switches.py"
    script.write_text(SWITCHES)
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = app_env(
        tmp_path,
        QT_QPA_PLATFORM="xcb",
        DISPLAY=xvfb,
        PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [sys.executable, str(script), str(tokenizer_dir), str(tmp_path / "settings.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert "settings: broken-1 could not be loaded:" in done.stdout and "switcher: broken-2" in done.stdout
    assert "alive, running good settings file good theme dark" in done.stdout, done.stdout
