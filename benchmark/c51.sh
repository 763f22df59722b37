#!/usr/bin/env bash
# C51, classic control, 500k steps.
# The benchmark of cleanrl/c51.py: env ids, seeds, budget and command in one place (docs/benchmark.md includes it).
# Extra arguments go to benchmark/run.py (before the `--`), e.g. `bash benchmark/c51.sh --workers 4`; a stopped run resumes.
# Then: python benchmark/report.py --results benchmark/results/c51 --out benchmark/report/c51
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/run.py \
    --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 \
    --seeds 1 2 3 \
    "$@" \
    -- python cleanrl/c51.py --total-timesteps 500000
