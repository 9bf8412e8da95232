#!/bin/bash
# Device call 1: the torch measurements of issue 53 item 1 on cores 0-7, while llama.cpp's CUDA build
# (scripts/build_llama_cuda.sh, sm_90 only) runs on cores 8-15; its libraries and programs come back
# packed in parts of 15 MB for the next call to carry. Results: results.tar.gz.
# First, here: bash docs/gpu-runs/next/prepare.sh (the project's wheel and its dependencies' in .whl/, llama.cpp's
# sources in .dev/: 12 MiB); the call carries them: carry [".whl", ".dev"].
# Call 2 (run2.sh, item 3: our trees verified by llama.cpp on the card) follows at once on this machine, warm,
# and uses the build where it is (/tmp/llama/bin); the parts are for a fresh machine. Untested on a card.
cd "$(dirname "$0")/../../.."  # the repo root
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -c "import zipfile, glob; z = zipfile.ZipFile(glob.glob('.whl/draftscope-*.whl')[0]); [z.extract(n, '/tmp/ext') for n in z.namelist() if '_retriever' in n and n.endswith('.so')]" && cp /tmp/ext/draftscope/_retriever*.so app/draftscope/
export PYTHONPATH=$PWD/app:/tmp/site DRAFTSCOPE_CACHE_DIR=/tmp/ds/cache DRAFTSCOPE_DATA_DIR=/tmp/ds/data DRAFTSCOPE_CONFIG_DIR=/tmp/ds/config
mkdir -p /tmp/llama-src /tmp/r && tar -xJf .dev/llama-src.tar.xz -C /tmp/llama-src
(taskset -c 8-15 bash scripts/build_llama_cuda.sh /tmp/llama /tmp/llama-src/llama.cpp > /tmp/r/llama-build.log 2>&1; echo "rc $?" >> /tmp/r/llama-build.log) &
build=$!
LIMIT_s15=200 LIMIT_s15_flex=90 LIMIT_s7=200 TAIL=22 taskset -c 0-7 bash scripts/gpu_measure.sh /tmp/r env s15 s15-flex s7
echo "--- waiting for llama.cpp's build ($SECONDS s so far)"
while kill -0 $build 2>/dev/null && [ $SECONDS -lt 540 ]; do sleep 5; done
tail -n 6 /tmp/r/llama-build.log
tar -czf $OUT/results.tar.gz -C /tmp/r .
if [ -f /tmp/llama/bin/llama-server ]; then
    cd /tmp/llama/bin && strip --strip-unneeded *.so* llama-server llama-bench 2>/dev/null; ls -la
    tar -cf - *.so* llama-server llama-bench | xz -T16 -6 > /tmp/llama-bin.tar.xz && ls -la /tmp/llama-bin.tar.xz
    split -b 15000000 /tmp/llama-bin.tar.xz $OUT/llama-bin.part-
fi
ls -la $OUT
