"""Before Qt starts on X11: are the system libraries of Qt's xcb platform plugin installed?

Without them Qt prints "xcb-cursor0 or libxcb-cursor0 is needed to load the Qt xcb platform
plugin" (or "could not load the Qt platform plugin xcb") and aborts the process. Here one ``ldd``
call on the plugin (about 10 ms) lists the libraries the dynamic linker cannot find, so the app
can name them, with the Debian/Ubuntu packages that provide them, and exit cleanly instead.

Qt-free on purpose: nothing of PySide6 is imported (the plugin is located from the installed
package's folder), so the check runs before any Qt library is loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

# Shared libraries of libqxcb.so and libQt6XcbQpa.so.6 (`ldd` on PySide6 6.11) and the Debian 12
# package holding each one (checked with `dpkg -S` and `dpkg -c`); Ubuntu uses the same names.
DEBIAN_PACKAGES = {
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
}


def uses_xcb(environ=None) -> bool:
    """Whether Qt will start on its xcb (X11) platform: Linux, an X display, and no other platform
    asked for. A Wayland session with QT_QPA_PLATFORM unset is left alone: Qt tries Wayland first."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or not env.get("DISPLAY"):
        return False
    platform = env.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.startswith("xcb")
    return not (env.get("XDG_SESSION_TYPE") == "wayland" and env.get("WAYLAND_DISPLAY"))


def xcb_plugin() -> Path | None:
    """The xcb platform plugin of the installed PySide6 (or of a bundle), found without importing it."""
    try:
        spec = find_spec("PySide6")
    except (ImportError, ValueError):
        spec = None
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    if getattr(sys, "_MEIPASS", None):  # a PyInstaller bundle
        folders.append(Path(sys._MEIPASS) / "PySide6")
    for folder in folders:
        plugin = folder / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def _run_ldd(path: Path) -> str:
    """``ldd PATH``'s output; empty when ldd is missing or fails (the check then does not block)."""
    try:
        run = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return run.stdout


def parse_missing(ldd_output: str) -> list[str]:
    """The ``name => not found`` libraries of an ldd listing, each once, in order."""
    missing: list[str] = []
    for line in ldd_output.splitlines():
        name, sep, where = line.strip().partition("=>")
        if sep and where.strip() == "not found" and name.strip() not in missing:
            missing.append(name.strip())
    return missing


def missing_xcb_libraries(environ=None) -> list[str]:
    """The libraries Qt's xcb plugin needs that are not installed; empty when xcb is not the
    platform Qt will use, or when the plugin or ldd cannot be found."""
    if not uses_xcb(environ):
        return []
    plugin = xcb_plugin()
    return parse_missing(_run_ldd(plugin)) if plugin is not None else []


def message_for(missing: list[str]) -> str:
    """What to tell the user about the missing libraries, with the packages to install."""
    named = [
        f"{lib} (Debian/Ubuntu package {DEBIAN_PACKAGES[lib]})" if lib in DEBIAN_PACKAGES else lib for lib in missing
    ]
    packages = list(dict.fromkeys(DEBIAN_PACKAGES[lib] for lib in missing if lib in DEBIAN_PACKAGES))
    install = (
        f"install them with `sudo apt-get install {' '.join(packages)}`"
        if packages
        else "install the packages that provide them"
    )
    return (
        f"draftscope: Qt cannot open a window on this X display: missing {', '.join(named)}; {install} "
        "or run `bash scripts/setup.sh` (from a source checkout). `draftscope chat` works in the terminal."
    )


def xcb_problem(environ=None) -> str | None:
    """The message to print when Qt's xcb platform would fail to load for missing libraries, else None."""
    missing = missing_xcb_libraries(environ)
    return message_for(missing) if missing else None
