#!/usr/bin/env bash
# One-stop set-up for a fresh machine, then run the app or the whole test suite.
#
#   scripts/setup.sh run    install everything and launch Draftscope
#   scripts/setup.sh test   install everything, check the style (ruff) and the types (mypy), and run every test (cargo test + pytest)
#   scripts/setup.sh        install everything only (also: rebuild the Rust extension after
#                           a change under retriever_rs/)
#
# Installs into the Python that runs `python3` (use a virtual environment if you prefer; create
# it with --system-site-packages to reuse a torch that is already installed).
set -euo pipefail

mode="${1:-install}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- System libraries Qt needs (installed only when missing) ---------------------------------
# The xcb (X11) platform plugin's libraries are those `ldd` lists for PySide6's
# Qt/plugins/platforms/libqxcb.so and Qt/lib/libQt6XcbQpa.so.6 (Debian 12 package names; a fresh
# Debian desktop lacks libxcb-cursor0, libxcb-icccm4 and libxcb-keysyms1, and Qt then aborts).
qt_libs=(libgl1 libegl1 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1 libfreetype6 libdbus-1-3 libglib2.0-0
         libx11-6 libx11-xcb1 libxcb1 libxcb-cursor0 libxcb-glx0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1
         libxcb-randr0 libxcb-render0 libxcb-render-util0 libxcb-shape0 libxcb-shm0 libxcb-sync1 libxcb-util1
         libxcb-xfixes0 libxcb-xkb1)
if [ "$mode" = test ]; then
    qt_libs+=(xvfb)  # the tests also start the app on a virtual X server (tests/gui/test_gui_xcb_start.py)
fi
if command -v dpkg-query >/dev/null 2>&1; then
    missing=()
    for pkg in "${qt_libs[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        say "installing system libraries for Qt: ${missing[*]}"
        if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
            say "could not install ${missing[*]}; install them with your package manager for the GUI"
        fi
    fi
elif [ "$(uname -s)" = Linux ]; then
    say "not a Debian/Ubuntu system: for the GUI install Qt's X11 libraries with your package manager"
    say "(libxcb-cursor, xcb-util-wm, xcb-util-keysyms, xcb-util-image, xcb-util-renderutil, libxkbcommon-x11)"
    if [ "$mode" = test ]; then
        say "and Xvfb (xorg-x11-server-Xvfb or xvfb) for the test that starts the app on X11"
    fi
fi

# --- Rust toolchain (the extension is built from source) -------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
    say "cargo not found: install Rust from https://rustup.rs (the retriever is a Rust extension)"
    exit 1
fi

# --- torch: keep a compatible one (a GPU machine's CUDA build), else install from PyPI --------
if "$PY" - <<'PYEOF' 2>/dev/null; then
import sys
import torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 1) else 1)
PYEOF
    say "using installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
    say "installing torch (several GB for the CUDA build; cached by pip afterwards)"
    "$PY" -m pip install "torch>=2.1"
fi

# --- pip >= 24.1 reports download progress in a form the first-run dialog can show -----------
"$PY" -m pip install -q -U "pip>=24.1"

# --- The package itself (maturin builds the Rust extension; editable, so Python edits apply) ---
say "building the Rust extension and installing draftscope"
"$PY" -m pip install -q -e ".[test]"

# --- llama.cpp: GGUF models run on it (llama-cpp-python, built from PyPI's source) -----------
# The build needs C and C++ compilers (cmake and ninja come from PyPI as wheels); with a CUDA
# toolkit (nvcc) it builds the CUDA backend too, and always the RPC backend. llama_build builds it
# for this CPU (the wheel kept in ~/.cache/draftscope/wheels under a key of this CPU's features and
# the build options, so only the first set-up on a machine pays the ~10 minutes on 2 cores), runs
# its self-test in a child (a quantised model, batched products, a draft tree) and, where a kernel
# faults (AMX on virtual machines that list it, an instruction a cached wheel's CPU had and this one
# lacks), rebuilds it without those kernels. DRAFTSCOPE_LLAMA_KERNELS=native|no-amx|avx2 forces a build.
if ! command -v gcc >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        say "installing C and C++ compilers to build llama.cpp: gcc g++"
        $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gcc g++ \
            || say "could not install gcc and g++; install them with your package manager"
    else
        say "llama.cpp is built from source: install gcc and g++ (or clang) with your package manager"
    fi
fi
"$PY" -m draftscope.engine.backends.llama.llama_build

case "$mode" in
    run)
        exec "$PY" -m draftscope "${@:2}"
        ;;
    test)
        say "ruff format --check; ruff check"  # the style is checked first: a violation fails CI in seconds
        "$PY" -m ruff format --check --quiet .
        "$PY" -m ruff check --quiet .
        say "mypy (engine/, core/, server/)"
        "$PY" -m mypy
        say "cargo test"
        cargo test --workspace --quiet
        say "pytest"
        # in an xdist worker: a test that dies of a native crash (a faulting kernel) fails by name, with
        # its signal (tests/crash_report.py), and a new worker runs the rest; the 30 slowest are listed
        # so the suite can be kept under its 25 minutes
        exec "$PY" -m pytest -q -n 1 --max-worker-restart 100 --durations=30 "${@:2}"
        ;;
    install)
        say "done; run 'draftscope' to start"
        ;;
    *)
        echo "usage: scripts/setup.sh [run|test|install]" >&2
        exit 2
        ;;
esac
