#!/bin/bash
# Device call 2 (same warm machine): SmolLM2-135M joined from the staged part and this call's part; real-model sections.
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 DRAFTSCOPE_CACHE_DIR=/tmp/ds/cache DRAFTSCOPE_DATA_DIR=/tmp/ds/data DRAFTSCOPE_CONFIG_DIR=/tmp/ds/config
[ -f /tmp/stage/smol.a ] || { echo "no staged part: a fresh machine"; exit 3; }
G=/tmp/stage/SmolLM2-135M-Instruct.Q4_1.gguf
cat /tmp/stage/smol.a .dev/smol.b > $G && sha256sum $G
timeout 230 python3 -m draftscope bench gpu --device cuda --model $G --tokens 128 --reps 3 --contexts 256,2048 --sections verify,plain,oracle,spec-bench --datastore .dev/smol-sharegpt.idx --questions /tmp/stage/spec_bench_question.jsonl --json $OUT/smol.jsonl > $OUT/smol.txt 2>&1; echo "rc $?" >> $OUT/smol.txt
tail -n 80 $OUT/smol.txt
