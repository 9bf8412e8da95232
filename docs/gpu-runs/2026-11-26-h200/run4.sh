#!/bin/bash
# Device call 4: the static cache with key spans and cuDNN inside the graphs (checked against math at capture).
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 DRAFTSCOPE_CACHE_DIR=/tmp/ds/cache DRAFTSCOPE_DATA_DIR=/tmp/ds/data DRAFTSCOPE_CONFIG_DIR=/tmp/ds/config
B="python3 -m draftscope bench gpu --device cuda"
timeout 120 $B --shape qwen2.5-1.5b --cache static --reps 3 --json $OUT/s15b.jsonl > $OUT/s15b.txt 2>&1; echo "rc $?" >> $OUT/s15b.txt
timeout 55 $B --shape qwen2.5-7b --cache static --reps 2 --contexts 2048 --sections verify,plain --json $OUT/s7b.jsonl > $OUT/s7b.txt 2>&1; echo "rc $?" >> $OUT/s7b.txt
cat $OUT/s15b.txt; tail -22 $OUT/s7b.txt
