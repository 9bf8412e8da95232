#!/bin/bash
# Before the device calls (here, on the CPU machine: the GPU machine has no network): everything run.sh
# carries, in .whl/ and .dev/ (both in .gitignore, so the `run` call names them: carry [".whl", ".dev"]).
#   .whl/  the project as its abi3 wheel (its Rust retriever; Python >= 3.10) and the wheels of the project's
#          own dependencies a machine with torch and transformers may lack (pure ones, or abi3)
#   .dev/  llama.cpp's sources from llama-cpp-python 0.3.36's sdist (run.sh builds them for the card),
#          llama-cpp-python's Python files without its CPU libraries and the gguf and diskcache wheels
# A call carries 64 MiB at most: the script stops if the two folders together are larger.
#
#   bash docs/gpu-runs/next/prepare.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repo root
say() { printf '[prepare] %s\n' "$*"; }
rm -rf .whl .dev
mkdir -p .whl .dev/whl .dev/py
say "the project's wheel (maturin, release)"
maturin build --release --auditwheel skip --out .whl 2>&1 | tail -n 2  # no patchelf: a linux_x86_64 wheel
say "its dependencies' wheels (pure, or abi3, for whatever Python the card's machine has)"
pure="--no-deps --only-binary=:all: --implementation py --python-version 3.10 --platform any"
python3 -m pip download -q $pure -d .whl psygnal platformdirs starlette anyio sniffio python-multipart \
    markdown-it-py mdurl pygments charset-normalizer pypdf python-docx uvicorn
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl psutil  # abi3 (cp36) for Linux x86-64
python3 -m pip download -q $pure -d .dev/whl gguf==0.19.0 diskcache==5.6.3
if ls .whl/*.whl | grep -v -e 'py3-none-any' -e 'abi3' >/dev/null; then say "a wheel for one Python only"; exit 1; fi
say "llama.cpp's sources (llama-cpp-python 0.3.36's sdist), without its models, tests and docs"
work="$(mktemp -d)"
python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==0.3.36" -d "$work"
tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
src="$work/llama_cpp_python-0.3.36/vendor"
tar -C "$src" -cf - --exclude='llama.cpp/models/*.gguf' --exclude='llama.cpp/docs' --exclude='llama.cpp/.git*' \
    --exclude='llama.cpp/media' llama.cpp | xz -T2 -6 > .dev/llama-src.tar.xz
say "llama-cpp-python's Python files (its libraries come from the CUDA build: LLAMA_CPP_LIB_PATH)"
cp -r "$work/llama_cpp_python-0.3.36/llama_cpp" .dev/py/
rm -rf .dev/py/llama_cpp/lib .dev/py/llama_cpp/__pycache__ "$work"
total=$(du -cb .whl .dev | tail -n 1 | cut -f 1)
du -sh .whl .dev
say "$((total / 1048576)) MiB in all (a call carries 64)"
[ "$total" -lt $((64 << 20)) ] || { say "too much for one call: leave something out"; exit 1; }
