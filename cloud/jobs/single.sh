# The command of the single-container job definition, run as:
#   bash -c "$(cat single.sh)" SCRIPT ENV_ID TOTAL_TIMESTEPS SEED CHECKPOINT_FREQUENCY
# AWS Batch fills the arguments from the job's parameters (Ref::script, Ref::envId, Ref::totalTimesteps,
# Ref::seed, Ref::checkpointFrequency). SCRIPT is free-form shell text, e.g.
# "python cleanrl/ppo_atari.py --num-envs 16"; the standard flags are appended to it. The run checkpoints every
# CHECKPOINT_FREQUENCY updates and resumes with --resume auto, under cloud/durable.py, which restores runs/ from S3
# (CLEANRL_RUNS_S3) when an earlier attempt of the job left it, uploads it while the run goes on and at every exit,
# and passes SIGTERM on: a retried attempt continues from the last checkpoint. CLEANRL_CODE: the repository (the
# image's /workspace).
set -euo pipefail
script="$0"
env_id="$1"
total_timesteps="$2"
seed="$3"
checkpoint_frequency="$4"
code="${CLEANRL_CODE:-/workspace}"
# Each child of an array job gets the same parameters: its index offsets the seed, so an array of N
# children runs seeds SEED..SEED+N-1. A plain job has no index and runs SEED.
seed=$((seed + ${AWS_BATCH_JOB_ARRAY_INDEX:-0}))
# The run's identity, by which cloud/durable.py keys its S3 folder: cloud/submit.py gives it as SWEEP/NAME-s{seed},
# the seed filled in here (an array child's own).
if [ -n "${CLEANRL_RUN_ID:-}" ]; then export CLEANRL_RUN_ID="${CLEANRL_RUN_ID//\{seed\}/${seed}}"; fi
echo "cleanrl job: ${script} --env-id ${env_id} --total-timesteps ${total_timesteps} --seed ${seed}" >&2
eval "exec python \"\${code}/cloud/durable.py\" -- ${script} --env-id \"\${env_id}\" \
  --total-timesteps \"\${total_timesteps}\" --seed \"\${seed}\" \
  --save-model --checkpoint-frequency \"\${checkpoint_frequency}\" --resume auto"
