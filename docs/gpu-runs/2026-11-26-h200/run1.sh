#!/bin/bash
# Device call 1: the shape models (static cache + CUDA graphs against the dynamic cache, the 7B shape),
# and the first part of SmolLM2's GGUF staged for call 2.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 DRAFTSCOPE_CACHE_DIR=/tmp/ds/cache DRAFTSCOPE_DATA_DIR=/tmp/ds/data DRAFTSCOPE_CONFIG_DIR=/tmp/ds/config
mkdir -p /tmp/stage && (cp .dev/smol.a .dev/spec_bench_question.jsonl /tmp/stage/ &)
{ date; nvidia-smi; python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__, torch.cuda.get_device_name())"; } > $OUT/env.txt 2>&1
B="python3 -m draftscope bench gpu --device cuda"
timeout 170 $B --shape qwen2.5-1.5b --cache static --json $OUT/s15.jsonl > $OUT/s15.txt 2>&1; echo "rc $?" >> $OUT/s15.txt
timeout 90 $B --shape qwen2.5-1.5b --cache dynamic --reps 3 --sections verify,worst,plain --json $OUT/d15.jsonl > $OUT/d15.txt 2>&1; echo "rc $?" >> $OUT/d15.txt
timeout 90 $B --shape qwen2.5-7b --cache static --reps 3 --contexts 2048 --sections verify,plain,oracle --json $OUT/s7.jsonl > $OUT/s7.txt 2>&1; echo "rc $?" >> $OUT/s7.txt
ls -la /tmp/stage; tail -n 3 $OUT/env.txt; cat $OUT/s15.txt | tail -45; tail -25 $OUT/d15.txt; tail -25 $OUT/s7.txt
