"""A virtual X server (Xvfb) for the tests that run the app on Qt's xcb platform, a real X window
rather than offscreen, at a screen size of the test's choosing."""

import os
import select
import shutil
import subprocess
import sys
from contextlib import contextmanager

import pytest


@contextmanager
def xvfb_display(size: str = "1280x800"):
    """Yields the display (":N") of an Xvfb with one ``size`` screen (``-displayfd``: Xvfb picks a
    free display and writes its number); skips where there is no Xvfb."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Qt's xcb platform is Linux-only")
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb not on PATH (Debian/Ubuntu package xvfb; `bash scripts/setup.sh test` installs it)")
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen(
        [binary, "-displayfd", str(write_fd), "-screen", "0", f"{size}x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
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


def app_env(tmp_path, **extra):
    """The environment of an app run in a child process: its own config, data and cache folders."""
    return dict(
        os.environ,
        DRAFTSCOPE_CONFIG_DIR=str(tmp_path / "config"),
        DRAFTSCOPE_DATA_DIR=str(tmp_path / "data"),
        DRAFTSCOPE_CACHE_DIR=str(tmp_path / "cache"),
        **extra,
    )
