#!/usr/bin/env bash
# DDPG, MuJoCo, 1M steps.
# The benchmark of cleanrl/ddpg_continuous_action.py: env ids, seeds, budget and command in one place (docs/benchmark.md includes it).
# Extra arguments go to benchmark/run.py (before the `--`), e.g. `bash benchmark/ddpg_continuous_action.sh --workers 4`; a stopped run resumes.
# Then: python benchmark/report.py --results benchmark/results/ddpg_continuous_action --out benchmark/report/ddpg_continuous_action
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/run.py \
    --env-ids HalfCheetah-v5 Walker2d-v5 Hopper-v5 \
    --seeds 1 2 3 \
    "$@" \
    -- python cleanrl/ddpg_continuous_action.py --total-timesteps 1000000
