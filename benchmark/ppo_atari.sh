#!/usr/bin/env bash
# PPO, Atari, 10M steps (one GPU per run when GPUs are present).
# The benchmark of cleanrl/ppo_atari.py: env ids, seeds, budget and command in one place (docs/benchmark.md includes it).
# Extra arguments go to benchmark/run.py (before the `--`), e.g. `bash benchmark/ppo_atari.sh --workers 4`; a stopped run resumes.
# Then: python benchmark/report.py --results benchmark/results/ppo_atari --out benchmark/report/ppo_atari
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/run.py \
    --env-ids PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4 \
    --seeds 1 2 3 \
    "$@" \
    -- python cleanrl/ppo_atari.py --total-timesteps 10000000
