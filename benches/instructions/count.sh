#!/usr/bin/env bash
# Instructions per call of one operation, counted by valgrind's callgrind: steady and machine-independent where
# wall time on a shared 2-CPU machine is not. Each change to a hot path in benches/PERFORMANCE.md was measured this way.
#
#   bash benches/instructions/count.sh CASE [N] [TOP]
#
# CASE: a file defining make() -> f (the setup, not counted; f is the operation), e.g. one of this folder's:
#   mlp.py       a one-tensor call as a tuned MLP makes it: from_inputs(.., strict=True), `in`, `[]`
#   dispatch.py  a benchmark workload's dispatch (WL=llm_decode by default; any name of benches/README.md)
#   from_inputs.py, to_json.py, from_json.py  that workload's walk alone, its metadata's to_json(), from_json()
#   tuned_call.py  a tuned module's whole call through AITune (MODEL, MODE=patched|stock; subtract N=0)
# N: calls counted (default 1000, after 200 uncounted ones). TOP: also list the TOP functions by own cost.
# KEEP=FILE keeps callgrind's output for callgrind_annotate (--inclusive=yes, --tree=caller, ...).
#
# Counting is on while Python runs inside functools.reduce (the harness's loop, run.py), and only after the case's
# set-up and warm-up: valgrind starts with instrumentation off (the set-up runs several times faster) and
# callgrind_control switches it on when run.py says it is ready. GATE=0 instruments from the start (as before
# 2026-12-07): then a make() that itself calls code using reduce (AITune's tuning does) adds that to the count,
# and a run with N=0 must be subtracted.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
case_file="$(realpath "$1")"
n="${2:-1000}"
top="${3:-0}"
py="${PYTHON:-$root/.venv/bin/python}"
command -v valgrind >/dev/null || { echo "count.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
out="${KEEP:-$(mktemp /tmp/callgrind.XXXXXX)}"
err="$(mktemp /tmp/callgrind_err.XXXXXX)"
gate_args=()
gate=""
if [ "${GATE:-1}" != 0 ]; then
    gate="$(mktemp -u /tmp/callgrind_gate.XXXXXX)"
    gate_args=(--instr-atstart=no)
fi
CALLGRIND_GATE="$gate" valgrind --tool=callgrind "${gate_args[@]}" --toggle-collect=functools_reduce \
    --callgrind-out-file="$out" "$py" "$here/run.py" "$case_file" "$n" >/dev/null 2>"$err" &
vg=$!
if [ -n "$gate" ]; then
    while [ ! -f "$gate.ready" ] && kill -0 "$vg" 2>/dev/null; do sleep 0.2; done
    if [ -f "$gate.ready" ]; then
        callgrind_control -i on "$(cat "$gate.ready")" >/dev/null
        touch "$gate.go"
    fi
fi
if ! wait "$vg"; then
    tail -20 "$err" >&2
    rm -f "$gate.ready" "$gate.go"
    exit 1
fi
rm -f "$gate.ready" "$gate.go"
total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
if [ "$n" -gt 0 ]; then
    echo "instructions per call: $((total / n))  (total $total, N=$n)"
else
    echo "instructions in the counted window with N=0: $total"
fi
if [ "$top" != 0 ]; then
    callgrind_annotate --inclusive=no "$out" 2>/dev/null | awk -v top="$top" '/^ *[0-9,]+ \(/ && ++n > 1 && n <= top + 1'
fi
[ -n "${KEEP:-}" ] || rm -f "$out"
rm -f "$err"
