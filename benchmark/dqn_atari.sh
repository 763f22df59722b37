#!/usr/bin/env bash
# DQN, Atari, 10M steps (one GPU per run when GPUs are present).
# The benchmark of cleanrl/dqn_atari.py: env ids, seeds, budget and command in one place (docs/benchmark.md includes it).
# Extra arguments go to benchmark/run.py (before the `--`), e.g. `bash benchmark/dqn_atari.sh --workers 4`; a stopped run resumes.
# Then: python benchmark/report.py --results benchmark/results/dqn_atari --out benchmark/report/dqn_atari
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/run.py \
    --env-ids PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4 \
    --seeds 1 2 3 \
    "$@" \
    -- python cleanrl/dqn_atari.py --total-timesteps 10000000
