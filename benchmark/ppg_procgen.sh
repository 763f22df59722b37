#!/usr/bin/env bash
# PPG, Procgen (envpool; the easy distribution is the default of ppg_procgen.py), 25M steps.
# The benchmark of cleanrl/ppg_procgen.py: env ids, seeds, budget and command in one place (docs/benchmark.md includes it).
# Extra arguments go to benchmark/run.py (before the `--`), e.g. `bash benchmark/ppg_procgen.sh --workers 4`; a stopped run resumes.
# Then: python benchmark/report.py --results benchmark/results/ppg_procgen --out benchmark/report/ppg_procgen
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/run.py \
    --env-ids starpilot bossfight bigfish \
    --seeds 1 2 3 \
    "$@" \
    -- python cleanrl/ppg_procgen.py --total-timesteps 25000000
