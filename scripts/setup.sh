#!/usr/bin/env bash
# One-stop set-up for a fresh machine, then run the app or the whole test suite.
#
#   scripts/setup.sh run    install Draftscope and launch it (arguments after `run` go to draftscope)
#   scripts/setup.sh test   install it with the test tools, check the style (ruff) and the types (mypy), and
#                           run every test (cargo test + pytest; arguments after `test` go to pytest)
#   scripts/setup.sh        install only (also: rebuild the Rust extension after a change under retriever_rs/)
#
# PyTorch is optional: GGUF models run on llama.cpp without it. It is installed where an NVIDIA card is
# (`nvidia-smi` on the PATH: PyPI's CUDA build), with --with-torch in any mode (without a card, the CPU
# build from download.pytorch.org: a few hundred MB instead of several GB), and always by `test`.
# A compatible torch that is already installed is kept. --torch-plan prints that choice and exits.
#
# Installs into the Python that runs `python3` (PYTHON=... for another; use a virtual environment if you
# prefer, created with --system-site-packages to reuse a torch that is already installed).
set -euo pipefail

with_torch=0
plan_only=0
args=()
for arg in "$@"; do
    case "$arg" in
        --with-torch) with_torch=1 ;;
        --torch-plan) plan_only=1 ;;
        *) args+=("$arg") ;;
    esac
done
mode="${args[0]:-install}"
rest=("${args[@]:1}")
case "$mode" in
    run|test|install) ;;
    *) echo "usage: scripts/setup.sh [run|test|install] [--with-torch] [--torch-plan] [arguments]" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- torch: whether it is wanted here, which build, and why (installed further down) ----------------
# optional_torch.install_plan is the one place that knows how torch is installed on this machine: the
# first line is the build (cuda: nvidia-smi finds a card), the second its size, then pip's arguments
mapfile -t torch_plan < <("$PY" -c '
import sys
sys.path.insert(0, "app")
from draftscope.optional_torch import has_nvidia_card, install_plan
plan = install_plan()
print("cuda" if has_nvidia_card() else "cpu", plan.size_words, *plan.pip_args, sep="\n")
')
((${#torch_plan[@]} >= 3)) || { say "could not read torch's install plan from app/draftscope/optional_torch.py"; exit 1; }
torch_pip_args=("${torch_plan[@]:2}")
if [ "${torch_plan[0]}" = cuda ]; then
    torch_build="PyPI's CUDA build"
    torch_card="nvidia-smi finds an NVIDIA card"
else
    torch_build="the CPU build from download.pytorch.org"
    torch_card="no NVIDIA card: nvidia-smi is not on the PATH"
fi
torch_why=""
if [ "$mode" = test ]; then
    torch_why="setup.sh test runs the torch backend's tests; $torch_card"
elif ((with_torch)); then
    torch_why="--with-torch; $torch_card"
elif [ "${torch_plan[0]}" = cuda ]; then
    torch_why="$torch_card"
fi
if [ -n "$torch_why" ]; then
    say "torch: $torch_build ($torch_why), ${torch_plan[1]}"
else
    say "torch: not needed ($torch_card, and no --with-torch): GGUF models run on llama.cpp without it;" \
        "add it later with 'bash scripts/setup.sh --with-torch' (${torch_plan[1]})"
fi
if ((plan_only)); then
    exit 0
fi

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

# --- pip >= 24.1 reports download progress in a form the first-run dialog can show -----------
"$PY" -m pip install -q -U "pip>=24.1"

# --- torch, where it is wanted: keep a compatible one (a GPU machine's CUDA build), else the plan's -----
if [ -n "$torch_why" ]; then
    if "$PY" - <<'PYEOF' 2>/dev/null; then
import sys
sys.path.insert(0, "app")
from draftscope.optional_torch import REQUIREMENT
import torch
need = tuple(int(x) for x in REQUIREMENT.split(">=")[1].split(".")[:2])
have = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if have >= need else 1)
PYEOF
        say "using the installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
    else
        say "installing torch: pip install ${torch_pip_args[*]}"
        "$PY" -m pip install "${torch_pip_args[@]}"
    fi
fi

# --- The package itself (maturin builds the Rust extension; editable, so Python edits apply) ---
# torch is the extra draftscope[torch] (with accelerate), which the test extra includes: torch is installed
# above where wanted, so pip finds it satisfied and a CPU machine does not fetch PyPI's CUDA build
say "building the Rust extension and installing draftscope"
if [ "$mode" = test ]; then
    "$PY" -m pip install -q -e ".[test]"
elif [ -n "$torch_why" ]; then
    "$PY" -m pip install -q -e ".[torch]"
else
    "$PY" -m pip install -q -e .
fi

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
        exec "$PY" -m draftscope "${rest[@]}"
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
        exec "$PY" -m pytest -q -n 1 --max-worker-restart 100 --durations=30 "${rest[@]}"
        ;;
    install)
        say "done; run 'draftscope' to start"
        ;;
esac
