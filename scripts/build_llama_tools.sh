#!/usr/bin/env bash
# llama.cpp's own programs, built from the llama.cpp sources that llama-cpp-python's sdist carries
# (the very llama.cpp the app runs on): llama-server (the peer `draftscope bench spec` measures
# against, with its own speculation types), llama-bench, and rpc-server (a worker for models split
# over machines). Not part of the normal set-up: about 20 minutes on 2 cores.
#
#   bash scripts/build_llama_tools.sh [DEST]     (default: ~/.cache/draftscope/llama.cpp-VERSION)
#
# Then `draftscope bench spec --methods llama-server,...` finds llama-server in DEST/bin (or on PATH).
set -euo pipefail

version="0.3.36"  # as scripts/setup.sh installs
PY="${PYTHON:-python3}"
dest="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/draftscope/llama.cpp-$version}"
say() { printf '\033[1m[llama-tools]\033[0m %s\n' "$*"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say "fetching llama-cpp-python $version's source (pip caches it)"
"$PY" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work"
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { say "no llama.cpp sources in the sdist at $src"; exit 1; }

if ! command -v cmake >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
    say "installing cmake and ninja from PyPI"
    "$PY" -m pip install -q cmake ninja
fi
# The kernels of the installed llama-cpp-python's build (without AMX where set-up had to turn it off).
kernel_args="$("$PY" -m draftscope.engine.backends.llama.llama_build --cmake-args)"
say "building llama-server, llama-bench and rpc-server into $dest (about 20 minutes on 2 cores): $kernel_args"
# shellcheck disable=SC2086
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release $kernel_args -DGGML_RPC=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build "$work/build" --target llama-server llama-bench ggml-rpc-server -j "$(nproc)"
mkdir -p "$dest/bin"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-bench" "$dest/bin/"
cp "$work/build/bin/ggml-rpc-server" "$dest/bin/rpc-server"  # the name llama.cpp's docs use
"$dest/bin/llama-server" --version 2>&1 | head -2 || true
say "done: $dest/bin"
