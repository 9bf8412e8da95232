#!/bin/bash
# One device call in place of run1.sh + run2.sh (a session has 15 device-minutes, a start included): llama.cpp's
# CUDA build (scripts/build_llama_cuda.sh, sm_90) on cores 4-15 while the torch parts run on cores 0-3; the
# moment the build is done, the torch part in flight is stopped (the card measures one thing at a time) and
# llama.cpp's parts run (the issue's order: llama.cpp first), then the torch parts left while time lasts.
# The build runs in a session of its own, so a build still running when the call ends lives on: a second
# call within the warm 30 s (DEADLINE_S small, PARTS="llama-qwen llama-smol") finds it in /tmp/llama.
# nvidia-smi logs the card's memory and use every second (smi.csv): the GPU-layers estimate against it.
# First, here: bash docs/gpu-runs/next/prepare.sh; the call carries [".whl", ".dev"]. Results: $OUT/results.tar.gz.
cd "$(dirname "$0")/../../.."  # the repo root
DEADLINE=${DEADLINE_S:-555}  # no part starts, or runs, past this many seconds of the call
TORCH_PARTS=${TORCH_PARTS:-s15 s15-flex s7 compiled profile}
LLAMA_PARTS=${LLAMA_PARTS:-llama-qwen llama-smol}
R=/tmp/r && mkdir -p $R /tmp/llama-src
say() { printf '[run %3ss] %s\n' "$SECONDS" "$*" | tee -a $R/run.log; }
left() { echo $((DEADLINE - SECONDS)); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-llama .dev/whl/*.whl || exit 1
python3 -c "import zipfile, glob; z = zipfile.ZipFile(glob.glob('.whl/draftscope-*.whl')[0]); [z.extract(n, '/tmp/ext') for n in z.namelist() if '_retriever' in n and n.endswith('.so')]" && cp /tmp/ext/draftscope/_retriever*.so app/draftscope/
export PYTHONUNBUFFERED=1 DRAFTSCOPE_CACHE_DIR=/tmp/ds/cache DRAFTSCOPE_DATA_DIR=/tmp/ds/data DRAFTSCOPE_CONFIG_DIR=/tmp/ds/config
TORCH_PATH=$PWD/app:/tmp/site-llama:/tmp/site  # gguf and diskcache too; not llama_cpp (no libraries before the build)
LLAMA_PATH=$PWD/app:$PWD/.dev/py:/tmp/site-llama:/tmp/site
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,clocks.sm --format=csv -l 1 > $R/smi.csv 2>&1 &
if [ "${BUILD:-1}" = 1 ] && [ ! -x /tmp/llama/bin/llama-bench ]; then
    tar -xJf .dev/llama-src.tar.xz -C /tmp/llama-src
    setsid bash -c "taskset -c 4-15 bash scripts/build_llama_cuda.sh /tmp/llama /tmp/llama-src/llama.cpp > $R/llama-build.log 2>&1; echo \"rc \$?\" >> $R/llama-build.log" &
    say "llama.cpp's CUDA build started on cores 4-15"
fi
building() { pgrep -f build_llama_cuda.sh > /dev/null; }
built() { ! building && [ -x /tmp/llama/bin/llama-bench ] && [ -x /tmp/llama/bin/llama-server ]; }
PYTHONPATH=$TORCH_PATH bash scripts/gpu_measure.sh $R env
torch_part() {  # one torch part on cores 0-3, in the background, limited by the time left
    local var="LIMIT_${1//-/_}" lim; lim=$(( $(left) - 10 )); [ "$lim" -gt 240 ] && lim=240
    say "torch part $1 (limit ${lim}s)"
    env "$var=$lim" PYTHONPATH=$TORCH_PATH TAIL=40 taskset -c 0-3 bash scripts/gpu_measure.sh $R "$1" > $R/log-$1.txt 2>&1 &
    torch_pid=$!
}
stop_torch() { pkill -TERM -f 'draftscope bench gpu --device cuda --shape' ; sleep 3; pkill -KILL -f 'draftscope bench gpu --device cuda --shape'; wait "$torch_pid" 2>/dev/null; }
pending=($TORCH_PARTS)
while [ ${#pending[@]} -gt 0 ] && building && [ "$(left)" -gt 60 ]; do
    torch_part "${pending[0]}"
    while kill -0 "$torch_pid" 2>/dev/null && building; do sleep 2; done
    if kill -0 "$torch_pid" 2>/dev/null; then say "build done: torch part ${pending[0]} stopped, to run again later"; stop_torch
    else pending=("${pending[@]:1}"); fi
done
while building && [ "$(left)" -gt 0 ]; do sleep 2; done
say "build: $(tail -n 3 $R/llama-build.log 2>/dev/null | tr '\n' ' ')"
if built; then
    ls -la /tmp/llama/bin > $R/llama-bin.txt
    LLAMA_CPP_LIB_PATH=/tmp/llama/bin LD_LIBRARY_PATH=/tmp/llama/bin:${LD_LIBRARY_PATH:-} PYTHONPATH=$LLAMA_PATH \
        timeout 60 python3 -m draftscope doctor > $R/doctor.txt 2>&1
    for part in $LLAMA_PARTS; do
        lim=$(( $(left) - 5 )); [ "$lim" -lt 30 ] && { say "no time for $part"; continue; }
        [ "$part" = llama-qwen ] && [ "$lim" -gt 150 ] && lim=150
        [ "$part" = llama-smol ] && [ "$lim" -gt 90 ] && lim=90
        say "llama part $part (limit ${lim}s)"
        var="LIMIT_${part//-/_}"
        env "$var=$lim" LLAMA_CPP_LIB_PATH=/tmp/llama/bin LD_LIBRARY_PATH=/tmp/llama/bin:${LD_LIBRARY_PATH:-} \
            PYTHONPATH=$LLAMA_PATH TAIL=45 bash scripts/gpu_measure.sh $R "$part"
    done
fi
for part in "${pending[@]}"; do
    [ "$(left)" -gt 60 ] || { say "no time for torch part $part"; continue; }
    torch_part "$part"; wait "$torch_pid"
done
say "done"
for f in $R/log-*.txt; do [ -f "$f" ] && tail -n 40 "$f"; done
kill %1 2>/dev/null
tar -czf $OUT/results.tar.gz -C $R .
ls -la $OUT
