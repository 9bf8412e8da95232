#!/usr/bin/env bash
# Every measurement of issue 53 on a CUDA card, written to a folder: each part's printout as
# OUT/PART.txt (its exit code on the last line) and its figures as OUT/PART.jsonl.
#
#   bash scripts/gpu_measure.sh OUT [PART ...]        (default: every part, in this order)
#
# Parts (the torch ones on Qwen2.5-shaped models with random weights: costs, not acceptance):
#   env        the card, driver, torch and transformers
#   s15        1.5B shape, graphs on SDPA (cuDNN): tree/plain at 256, 2,000, 8,000 cached tokens, the worst
#              step, the plain loop against HF generate, the oracle with the adaptive budget
#   s15-flex   1.5B shape, graphs on FlexAttention: the same cost curve
#   s7         7B shape, both attentions captured and the faster kept: cost curve, plain loop, oracle
#   compiled   1.5B shape with compiled steps (torch.compile inside the capture): the capture's time
#   profile    torch.profiler of a plain and a 64-node step, graphed and eager (scripts/profile_gpu_step.py)
#   smol       SmolLM2-135M (SMOL_GGUF) on torch: the oracle and Spec-Bench (`auto` against our graphed plain
#              loop and HF's prompt lookup), with SMOL_DATASTORE and SPEC_QUESTIONS when given
# Each part runs under a time limit (LIMIT_<part>, seconds) so one that hangs cannot take the rest.
set -uo pipefail

out="${1:?usage: scripts/gpu_measure.sh OUT [PART ...]}"
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(env s15 s15-flex s7 compiled profile smol)
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
B="$PY -m draftscope bench gpu --device cuda"
CONTEXTS=256,2000,8000

limit() { local var="LIMIT_${1//-/_}"; echo "${!var:-$2}"; }

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
            extra=()
            [ -n "${SMOL_DATASTORE:-}" ] && extra+=(--datastore "$SMOL_DATASTORE")
            [ -n "${SPEC_QUESTIONS:-}" ] && extra+=(--questions "$SPEC_QUESTIONS")
            run_part smol 300 $B --model "${SMOL_GGUF:?SMOL_GGUF: SmolLM2-135M-Instruct's GGUF}" --tokens 128 --reps 3 \
                --contexts 256,2000 --sections oracle,spec-bench --spec-methods hf,hf-pld,plain,auto \
                --json "$out/smol.jsonl" "${extra[@]}" ;;
        *)
            echo "unknown part $part" >&2
            exit 2 ;;
    esac
done
