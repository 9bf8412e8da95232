#!/usr/bin/env bash
# Build the one-folder CPU bundle of Draftscope with PyInstaller: dist/draftscope/draftscope.
#
#     bash scripts/build_bundle.sh          # build (installs pyinstaller with pip when missing)
#     bash scripts/build_bundle.sh --check  # build, then copy it outside the checkout and smoke-test it:
#                                           # the window starts offscreen, and a GGUF answers on llama.cpp
#
# The Python that runs this must have Draftscope installed (scripts/setup.sh, or `pip install -e .`)
# with its Rust extension and llama.cpp built: the bundle takes the packages from it, leaving torch out
# even where it is installed. It prints the bundle's size and fails past LIMIT_MB (600; the issue's target).
# PYTHON chooses another interpreter, MODEL another GGUF for the check (default: the cached SmolLM2-135M).
# packaging/README.md explains the result.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
LIMIT_MB="${LIMIT_MB:-600}"
CHECK=0
for arg in "$@"; do
    case "$arg" in
        --check) CHECK=1 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
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
"$PYTHON" -c "import llama_cpp" || {
    echo "build_bundle.sh: llama.cpp (llama-cpp-python) is not installed; run scripts/setup.sh first" >&2
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
size_mb=$(du -sm dist/draftscope | cut -f1)
echo "== built dist/draftscope in $((end - start)) s; size ${size_mb} MB ($(find dist/draftscope -type f | wc -l) files)"
echo "== its largest parts (MB):"
du -sm dist/draftscope/_internal/* | sort -rn | head -8 | sed 's|dist/draftscope/_internal/|    |'
if [ "$size_mb" -gt "$LIMIT_MB" ]; then
    echo "build_bundle.sh: the bundle is ${size_mb} MB, over the ${LIMIT_MB} MB target: see what grew above" >&2
    exit 1
fi

if [ "$CHECK" = 1 ]; then
    CHECK_DIR="${CHECK_DIR:-/tmp/bundle-check}"
    echo "== smoke test from $CHECK_DIR (outside the checkout)"
    rm -rf "$CHECK_DIR" && mkdir -p "$CHECK_DIR"
    cp -a dist/draftscope "$CHECK_DIR/"
    cd /tmp
    bundle="$CHECK_DIR/draftscope/draftscope"
    env -u PYTHONPATH -u PYTHONHOME QT_QPA_PLATFORM=offscreen "$bundle" gui --quit-after 2000
    echo "== gui smoke test passed"
    MODEL="${MODEL:-$(cd "$ROOT" && "$PYTHON" -c "from draftscope.models import catalog; print(catalog.get('smollm2-135m').path)")}"
    [ -f "$MODEL" ] || { echo "build_bundle.sh: no GGUF at $MODEL (python -m draftscope models fetch smollm2-135m, or MODEL=)" >&2; exit 1; }
    echo "== generate on llama.cpp with $MODEL"
    answer=$(env -u PYTHONPATH -u PYTHONHOME "$bundle" generate "What is the capital of France?" \
        --model "$MODEL" --max-new-tokens 8 --temperature 0)
    printf '%s\n' "$answer"
    [ -n "${answer//[[:space:]]/}" ] || { echo "build_bundle.sh: the bundle answered nothing" >&2; exit 1; }
    echo "== generate smoke test passed"
fi
