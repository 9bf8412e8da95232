#!/usr/bin/env bash
# A newcomer's set-up, measured (docs/benchmarks.md "Issue 67"): a fresh clone of this checkout, a fresh venv
# (no torch), empty pip, cargo and Draftscope caches; setup.sh install, the recommended model, the first answer.
# Figures land in $NC/times (seconds since the epoch and eth0's received bytes at each step). NC=/tmp/nc by default.
set -uo pipefail
NC="${NC:-/tmp/nc}"; rm -rf "$NC"; mkdir -p "$NC"
git clone -q "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" $NC/main
python3 -m venv $NC/venv
export PIP_CACHE_DIR=$NC/pip XDG_CACHE_HOME=$NC/xdg
export DRAFTSCOPE_CONFIG_DIR=$NC/config DRAFTSCOPE_DATA_DIR=$NC/data
export CARGO_HOME=$NC/cargo; mkdir -p $CARGO_HOME; ln -s "$HOME/.cargo/bin" "$CARGO_HOME/bin"  # the toolchain as installed; its crates fetched afresh
rx() { awk '/eth0/ {print $2}' /proc/net/dev; }
stamp() { echo "$1 $(date +%s) $(rx)" >> $NC/times; }
stamp start
PYTHON=$NC/venv/bin/python bash $NC/main/scripts/setup.sh install > $NC/setup.log 2>&1; echo "setup rc $?" >> $NC/times
stamp installed
$NC/venv/bin/python -c "import importlib.util as u; print('torch in venv:', u.find_spec('torch') is not None)" >> $NC/times
MODEL=$($NC/venv/bin/python -c "from draftscope.models import catalog; print(catalog.recommend(catalog.total_memory(), 'cpu', 'auto', 'llama.cpp').name)")
echo "model $MODEL" >> $NC/times
$NC/venv/bin/draftscope models fetch $MODEL > $NC/fetch.log 2>&1; echo "fetch rc $?" >> $NC/times
stamp fetched
$NC/venv/bin/draftscope generate "Write a Python function that reverses a string." --model $MODEL --max-new-tokens 64 > $NC/answer.log 2>&1; echo "generate rc $?" >> $NC/times
stamp answered
du -sb $NC/venv $NC/xdg $NC/pip $NC/cargo $NC/main >> $NC/times 2>/dev/null
du -sb $NC/xdg/draftscope/* >> $NC/times 2>/dev/null
echo done >> $NC/times
