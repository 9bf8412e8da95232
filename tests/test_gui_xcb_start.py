"""The app on a real X server (Xvfb, Qt's xcb platform) rather than offscreen: the main window
shows and a screenshot of it from the X server is not blank; and when the xcb plugin's system
libraries are missing, the app names them and exits 2 instead of Qt's abort."""

import os
import select
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from draftscope.gui import platform_check

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb platform is Linux-only")


@pytest.fixture
def xvfb():
    """A virtual X server on a free display (``-displayfd``: Xvfb picks it and writes its number)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Qt's xcb platform is Linux-only")
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb not on PATH (Debian/Ubuntu package xvfb; `bash scripts/setup.sh test` installs it)")
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen([binary, "-displayfd", str(write_fd), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                              pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(write_fd)
    try:
        number = b""
        while not number.endswith(b"\n"):
            ready, _, _ = select.select([read_fd], [], [], 20)
            chunk = os.read(read_fd, 16) if ready else b""
            if not chunk:
                server.kill()
                pytest.fail(f"Xvfb did not start: {server.communicate()[1].decode(errors='replace')[-1000:]}")
            number += chunk
        yield f":{int(number)}"
    finally:
        os.close(read_fd)
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _app_env(tmp_path, **extra):
    return dict(os.environ, DRAFTSCOPE_CONFIG_DIR=str(tmp_path / "config"), DRAFTSCOPE_DATA_DIR=str(tmp_path / "data"),
                DRAFTSCOPE_CACHE_DIR=str(tmp_path / "cache"), **extra)


def test_the_app_shows_its_window_on_an_x_server(xvfb, tmp_path, tokenizer_dir, tokenizer):
    from engine_fixtures import tiny_llama

    model_dir = tmp_path / "tiny-model"
    shutil.copytree(tokenizer_dir, model_dir)
    tiny_llama(len(tokenizer), seed=1).save_pretrained(model_dir)
    shot = tmp_path / "shot.png"
    # xcb explicitly: conftest makes offscreen the default for the test process and its children
    env = _app_env(tmp_path, DISPLAY=xvfb, QT_QPA_PLATFORM="xcb")
    run = subprocess.run([sys.executable, "-m", "draftscope", "gui", "--model", str(model_dir), "--quit-after", "3000",
                          "--screenshot", str(shot)], env=env, capture_output=True, text=True, timeout=300)
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
    for env in ({}, {"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, {"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland"},
                {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}):
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
    env = _app_env(tmp_path, DISPLAY=":99", QT_QPA_PLATFORM="xcb", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run([sys.executable, "-m", "draftscope", "gui"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "Qt cannot open a window on this X display: missing libxcb-cursor.so.0" in run.stderr
    assert "sudo apt-get install libxcb-cursor0" in run.stderr
    assert "platform plugin" not in run.stderr, "Qt was not started"


def test_a_screenshot_needs_quit_after(tmp_path, capsys):
    pytest.importorskip("PySide6")
    from draftscope.cli import main

    assert main(["gui", "--screenshot", str(tmp_path / "shot.png")]) == 2
    assert "--screenshot needs --quit-after" in capsys.readouterr().err
