#!/usr/bin/env bash
# Every measurement of issue 53 on a CUDA card, written to a folder: each part's printout as
# OUT/PART.txt (its exit code on the last line) and its figures as OUT/PART.jsonl.
#
#   bash scripts/gpu_measure.sh OUT [PART ...]        (default: every part, in this order)
#
# Parts (the torch ones on Qwen2.5-shaped models with random weights: costs, not acceptance):
#   env        the card, driver, torch and transformers
#   s15        1.5B shape, graphs on SDPA (cuDNN): tree/plain at 256, 2,000, 7,000 cached tokens, the worst
#              step, the plain loop against HF generate, the oracle with the adaptive budget
#   s15-flex   1.5B shape, graphs on FlexAttention: the same cost curve
#   s7         7B shape, both attentions captured and the faster kept: cost curve, plain loop, oracle
#   compiled   1.5B shape with compiled steps (torch.compile inside the capture): the capture's time
#   profile    torch.profiler of a plain and a 64-node step, graphed and eager (scripts/profile_gpu_step.py)
#   smol       SmolLM2-135M (SMOL_GGUF) on torch: the oracle and Spec-Bench (`auto` against our graphed plain
#              loop and HF's prompt lookup), with SMOL_DATASTORE and SPEC_QUESTIONS when given
# Item 3, our trees verified by llama.cpp on the card (LLAMA_CPP_LIB_PATH: the libraries of
# scripts/build_llama_cuda.sh; without them llama.cpp has no CUDA and the parts say so), every layer there:
#   llama-qwen Qwen2.5-Coder-1.5B (QWEN_GGUF; without it, a GGUF of the 1.5B shape with random weights in
#              Q4_K_M's block types, written there: the real file is 1.1 GB, a transfer 64 MiB): tree/plain
#              at 256, 2,000, 7,000 cached tokens with the bandwidth share, the plain loop, and the peers on
#              the same GGUF and layers: llama-bench's tg and llama-server's answers beside ours
#              (LLAMA_BENCH, default the llama-bench beside LLAMA_CPP_LIB_PATH's libraries, and its llama-server)
#   llama-smol the same for SmolLM2-135M (SMOL_GGUF, else its shape in Q4_1) at 256, 2,000, 7,000 (it holds 8,192)
#   llama-s7   the same for the 7B shape (Q4_K_M's block types, 4.5 GB): what a consumer card runs
#   llama      llama-qwen and llama-smol
# Each part runs under a time limit (LIMIT_<part>, seconds; LIMIT_llama_qwen for llama-qwen) so one that hangs
# cannot take the rest. Parts are checked before any runs: an unknown one is an error (exit 2).
set -uo pipefail

out="${1:?usage: scripts/gpu_measure.sh OUT [PART ...]}"
shift
known=(env s15 s15-flex s7 compiled profile smol llama-qwen llama-smol llama-s7)
parts=()
for part in "$@"; do
    if [ "$part" = llama ]; then
        parts+=(llama-qwen llama-smol)
    elif [[ " ${known[*]} " == *" $part "* ]]; then
        parts+=("$part")
    else
        echo "unknown part $part (parts: ${known[*]} llama)" >&2
        exit 2
    fi
done
[ ${#parts[@]} -gt 0 ] || parts=("${known[@]}")
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
B="$PY -m draftscope bench gpu --device cuda"
CONTEXTS=${CONTEXTS:-256,2000,7000}  # 7,000 + a tree and the tokens written fit the shapes' 8,192

limit() { local var="LIMIT_${1//-/_}"; echo "${!var:-$2}"; }

llama_part() {  # name, default limit, the variable naming its GGUF, the shape without one, contexts
    local name="$1" limit="$2" file="${!3:-}" what=(--shape "$4") extra=()
    [ -n "$file" ] && what=(--model "$file")
    [ -n "${LLAMA_BENCH:-}" ] && extra=(--llama-bench "$LLAMA_BENCH")
    run_part "$name" "$limit" $B --backend llama.cpp --gpu-layers all "${what[@]}" --contexts "$5" --reps 3 \
        --sections verify,plain,peer --json "$out/$name.jsonl" "${extra[@]}"
}

run_part() {  # name, default limit, command...
    local name="$1" seconds
    seconds="$(limit "$1" "$2")"
    shift 2
    printf '\n### %s (limit %ss): %s\n' "$name" "$seconds" "$*"
    local started=$SECONDS
    timeout "$seconds" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    echo "rc $rc after $((SECONDS - started)) s" >> "$out/$name.txt"
    tail -n "${TAIL:-30}" "$out/$name.txt"
}

for part in "${parts[@]}"; do
    case "$part" in
        env)
            { date -u; nvidia-smi; $PY -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__, torch.cuda.get_device_name())"; } > "$out/env.txt" 2>&1
            tail -n 2 "$out/env.txt" ;;
        s15)
            run_part s15 240 $B --shape qwen2.5-1.5b --cache static --attention sdpa --compiled off --contexts $CONTEXTS \
                --sections verify,worst,plain,oracle --json "$out/s15.jsonl" ;;
        s15-flex)
            run_part s15-flex 120 $B --shape qwen2.5-1.5b --cache static --attention flex --compiled off \
                --contexts $CONTEXTS --sections verify,worst --json "$out/s15-flex.jsonl" ;;
        s7)
            run_part s7 240 $B --shape qwen2.5-7b --cache static --attention auto --compiled off --contexts $CONTEXTS \
                --reps 3 --sections verify,plain,oracle --json "$out/s7.jsonl" ;;
        compiled)
            run_part compiled 200 $B --shape qwen2.5-1.5b --cache static --attention auto --compiled on \
                --contexts $CONTEXTS --reps 3 --sections verify --json "$out/compiled.jsonl" ;;
        profile)
            run_part profile 150 $PY scripts/profile_gpu_step.py --shape qwen2.5-1.5b --context 2000 ;;
        smol)
            if [ -z "${SMOL_GGUF:-}" ]; then  # torch's Spec-Bench needs the real model: its tokens, its answers
                echo "smol: skipped, SMOL_GGUF (the GGUF of SmolLM2-135M-Instruct) is not set" | tee "$out/smol.txt"
                continue
            fi
            extra=()
            [ -n "${SMOL_DATASTORE:-}" ] && extra+=(--datastore "$SMOL_DATASTORE")
            [ -n "${SPEC_QUESTIONS:-}" ] && extra+=(--questions "$SPEC_QUESTIONS")
            run_part smol 300 $B --model "$SMOL_GGUF" --tokens 128 --reps 3 \
                --contexts 256,2000 --sections oracle,spec-bench --spec-methods hf,hf-pld,plain,auto \
                --json "$out/smol.jsonl" "${extra[@]}" ;;
        llama-qwen)
            llama_part llama-qwen 180 QWEN_GGUF qwen2.5-1.5b $CONTEXTS ;;
        llama-smol)
            llama_part llama-smol 120 SMOL_GGUF smollm2-135m 256,2000,7000 ;;
        llama-s7)
            llama_part llama-s7 240 S7_GGUF qwen2.5-7b $CONTEXTS ;;
    esac
done
