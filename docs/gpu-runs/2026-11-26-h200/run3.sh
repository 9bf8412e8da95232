#!/bin/bash
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 DRAFTSCOPE_CACHE_DIR=/tmp/ds/cache DRAFTSCOPE_DATA_DIR=/tmp/ds/data
timeout 170 python3 .dev/prof.py cuda qwen2.5-1.5b 2>&1 | grep -v "^USDT\|profiler_st" | tee $OUT/prof.txt
