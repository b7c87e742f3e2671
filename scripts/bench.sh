#!/usr/bin/env bash
# The benchmark (the project's main job): set-up, then aitune_fast against the reference, optree and the
# floor on the workloads of benches/README.md; prints the table of times and ratios and writes
# benches/results/bench.json and benches/results/speedups.png.
# Options pass through: --quick (3-9 minutes on 2 cores), --workloads ..., --ops ..., --out DIR; see --help.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m aitune_fast.bench "$@"
