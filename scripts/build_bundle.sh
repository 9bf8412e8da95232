#!/usr/bin/env bash
# Build the one-folder Draftscope bundle with PyInstaller: dist/draftscope/draftscope.
#
#     bash scripts/build_bundle.sh          # build (installs pyinstaller with pip when missing)
#     bash scripts/build_bundle.sh --check  # build, then copy it outside the checkout and smoke-test it
#
# The Python that runs this must have Draftscope installed (scripts/setup.sh, or
# `pip install -e .`) with its Rust extension built: the bundle takes the packages from it.
# Set PYTHON to choose another interpreter. packaging/README.md explains the result.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CHECK=0
for arg in "$@"; do
    case "$arg" in
        --check) CHECK=1 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "build_bundle.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

cd "$ROOT"
if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
    echo "== installing pyinstaller"
    "$PYTHON" -m pip install "pyinstaller>=6.10"
fi
"$PYTHON" -c "import draftscope._retriever" || {
    echo "build_bundle.sh: draftscope's Rust extension is not built; run scripts/setup.sh first" >&2
    exit 1
}
# The icons must be current: regenerate the PNGs if the SVG is newer than any of them.
if [ -n "$(find resources/icons/draftscope.svg -newer resources/icons/png/draftscope-16.png 2>/dev/null)" ]; then
    "$PYTHON" scripts/make_icons.py
fi

echo "== building dist/draftscope with PyInstaller $("$PYTHON" -c 'import PyInstaller; print(PyInstaller.__version__)')"
start=$(date +%s)
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" packaging/draftscope.spec
end=$(date +%s)
echo "== built dist/draftscope in $((end - start)) s; size $(du -sh dist/draftscope | cut -f1)"

if [ "$CHECK" = 1 ]; then
    CHECK_DIR="${CHECK_DIR:-/tmp/bundle-check}"
    echo "== smoke test from $CHECK_DIR (outside the checkout)"
    rm -rf "$CHECK_DIR" && mkdir -p "$CHECK_DIR"
    cp -a dist/draftscope "$CHECK_DIR/"
    cd /tmp
    env -u PYTHONPATH -u PYTHONHOME QT_QPA_PLATFORM=offscreen "$CHECK_DIR/draftscope/draftscope" gui --quit-after 2000
    echo "== gui smoke test passed"
fi
