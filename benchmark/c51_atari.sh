#!/usr/bin/env bash
# C51, Atari, 10M steps (one GPU per run when GPUs are present).
# The benchmark of cleanrl/c51_atari.py: env ids, seeds, budget and command in one place (docs/benchmark.md includes it).
# Extra arguments go to benchmark/run.py (before the `--`), e.g. `bash benchmark/c51_atari.sh --workers 4`; a stopped run resumes.
# Then: python benchmark/report.py --results benchmark/results/c51_atari --out benchmark/report/c51_atari
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/run.py \
    --env-ids PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4 \
    --seeds 1 2 3 \
    "$@" \
    -- python cleanrl/c51_atari.py --total-timesteps 10000000
