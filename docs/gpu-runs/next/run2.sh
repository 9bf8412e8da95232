#!/bin/bash
# Device call 2 (issue 53 item 3): our trees verified by llama.cpp on the card, every layer there. The tree/plain
# cost curve at 256, 2,000 and 8,000 cached tokens with the bandwidth share, our plain loop, and the peers on the
# same GGUF and layers: llama-bench's tg and llama-server's answers (scripts/gpu_measure.sh's llama parts).
# UNTESTED ON A CARD: written and its parts tested on a CPU only (tests/bench/test_bench_gpu_llama.py).
#
# Run it at once after call 1, on the machine call 1 left warm (it is given back 30 s after a call): call 1's
# llama.cpp CUDA build is in /tmp/llama/bin and its wheels in /tmp/site. On a fresh machine, carry call 1's
# $OUT/llama-bin.part-* as .dev/llama-bin.part-* (and the wheels again); they are unpacked to /tmp/llama/bin,
# the path the build's RUNPATH names.
#
# No model file can come (no network there, 64 MiB a transfer; Qwen2.5-Coder-1.5B's Q4_K_M is 1.1 GB): the parts
# write GGUFs of the 1.5B, SmolLM2-135M and 7B shapes with random weights in the real files' block types
# (bench gpu --backend llama.cpp --shape: costs, not acceptance). QWEN_GGUF, SMOL_GGUF, S7_GGUF name real files
# where some are there.
#
# Prepared here by docs/gpu-runs/next/prepare.sh (.whl/ and .dev/, both in .gitignore, so the call names them in
# carry): llama-cpp-python's Python files without its CPU libraries (LLAMA_CPP_LIB_PATH points them at the CUDA
# build) and the gguf and diskcache wheels the device lacks.
# Results: $OUT/llama-results.tar.gz (each part's .txt and .jsonl). About 3-4 minutes on an H100 or H200.
cd "$(dirname "$0")/../../.."  # the repo root
if [ ! -x /tmp/llama/bin/llama-bench ]; then
    ls .dev/llama-bin.part-* >/dev/null 2>&1 || { echo "no llama.cpp CUDA build: a fresh machine, and no .dev/llama-bin.part-*"; exit 3; }
    mkdir -p /tmp/llama/bin && cat .dev/llama-bin.part-* | xz -d | tar -xf - -C /tmp/llama/bin || exit 3
fi
if [ ! -d /tmp/site/draftscope ] && ls .whl/*.whl >/dev/null 2>&1; then  # a fresh machine: call 1's wheels again
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    python3 -c "import zipfile, glob; z = zipfile.ZipFile(glob.glob('.whl/draftscope-*.whl')[0]); [z.extract(n, '/tmp/ext') for n in z.namelist() if '_retriever' in n and n.endswith('.so')]" && cp /tmp/ext/draftscope/_retriever*.so app/draftscope/
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-llama .dev/whl/*.whl || exit 1
export PYTHONPATH=$PWD/app:$PWD/.dev/py:/tmp/site-llama:/tmp/site PYTHONUNBUFFERED=1
export LLAMA_CPP_LIB_PATH=/tmp/llama/bin LD_LIBRARY_PATH=/tmp/llama/bin:${LD_LIBRARY_PATH:-}
export DRAFTSCOPE_CACHE_DIR=/tmp/ds/cache DRAFTSCOPE_DATA_DIR=/tmp/ds/data DRAFTSCOPE_CONFIG_DIR=/tmp/ds/config
ls -la /tmp/llama/bin | head -n 20
timeout 60 python3 -m draftscope doctor 2>&1 | grep -i "llama\|gpu\|cuda" | head -n 8  # the GPU backends this build has
mkdir -p /tmp/r2
LIMIT_llama_qwen=110 LIMIT_llama_smol=60 LIMIT_llama_s7=100 TAIL=30 bash scripts/gpu_measure.sh /tmp/r2 llama-qwen llama-smol llama-s7
tar -czf $OUT/llama-results.tar.gz -C /tmp/r2 .
ls -la $OUT
