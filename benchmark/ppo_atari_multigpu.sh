#!/usr/bin/env bash
# PPO on Atari with data-parallel ranks (torchrun, 2 processes), 10M steps; each run sees 2 GPUs when present.
# The benchmark of cleanrl/ppo_atari_multigpu.py: env ids, seeds, budget and command in one place (docs/benchmark.md includes it).
# Extra arguments go to benchmark/run.py (before the `--`), e.g. `bash benchmark/ppo_atari_multigpu.sh --workers 4`; a stopped run resumes.
# Then: python benchmark/report.py --results benchmark/results/ppo_atari_multigpu --out benchmark/report/ppo_atari_multigpu
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/run.py \
    --env-ids PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4 \
    --seeds 1 2 3 \
    --gpus-per-run 2 \
    "$@" \
    -- torchrun --standalone --nproc_per_node=2 cleanrl/ppo_atari_multigpu.py --total-timesteps 10000000
