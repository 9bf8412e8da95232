#!/usr/bin/env bash
# llama.cpp with its CUDA backend, built for this machine's card only (its compute capability, from
# nvidia-smi: one architecture builds in minutes instead of the half hour of every architecture):
# the shared libraries llama-cpp-python loads (point LLAMA_CPP_LIB_PATH at DEST/bin), llama-server
# and llama-bench (the peers `bench gpu --backend llama.cpp` measures against).
#
#   bash scripts/build_llama_cuda.sh DEST [SRC]    (SRC: a llama.cpp source tree; default: the one in
#                                                   llama-cpp-python 0.3.36's sdist, fetched by pip)
set -euo pipefail
dest="${1:?usage: scripts/build_llama_cuda.sh DEST [SRC]}"
src="${2:-}"
say() { printf '[llama-cuda] %s\n' "$*"; }
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null 2>&1 || { say "no nvcc: a CUDA toolkit is needed"; exit 1; }
if [ -z "$src" ]; then
    work="$(mktemp -d)"
    python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==0.3.36" -d "$work"
    tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
    src="$work/llama_cpp_python-0.3.36/vendor/llama.cpp"
fi
arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')"
[ -n "$arch" ] || { say "nvidia-smi names no card"; exit 1; }
# The CPU kernels: this CPU's features named one by one, AMX left out (the card's machine lists AMX and
# llama.cpp's -march=native build died of SIGSEGV loading a model there, 2026-11-28: docs/gpu-runs/2026-11-28-h200).
cpu="$(PYTHONPATH="$(dirname "$0")/../app${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
    'from draftscope.engine.backends.llama.llama_build import cmake_args, cpu_flags; print(cmake_args("no-amx", cpu_flags(), ""))')" \
    || { say "could not name this CPU's kernels"; exit 1; }
say "building for sm_$arch from $src into $dest ($(nproc) cores; CPU kernels:$cpu)"
started=$SECONDS
cmake -S "$src" -B "$dest" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DBUILD_SHARED_LIBS=ON $cpu -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON > "$dest.cmake.log" 2>&1 \
    || { tail -n 30 "$dest.cmake.log"; exit 1; }
cmake --build "$dest" --target llama llama-server llama-bench -j "$(nproc)"
say "built in $((SECONDS - started)) s: $(ls "$dest/bin" | tr '\n' ' ')"
