# The command of the single-container job definition, run as:
#   bash -c "$(cat single.sh)" SCRIPT ENV_ID TOTAL_TIMESTEPS SEED
# AWS Batch fills the four arguments from the job's parameters (Ref::script, Ref::envId,
# Ref::totalTimesteps, Ref::seed). SCRIPT is free-form shell text, e.g.
# "python cleanrl/ppo_atari.py --num-envs 16"; the standard flags are appended to it.
set -euo pipefail
script="$0"
env_id="$1"
total_timesteps="$2"
seed="$3"
# Each child of an array job gets the same parameters: its index offsets the seed, so an array of N
# children runs seeds SEED..SEED+N-1. A plain job has no index and runs SEED.
seed=$((seed + ${AWS_BATCH_JOB_ARRAY_INDEX:-0}))
echo "cleanrl job: ${script} --env-id ${env_id} --total-timesteps ${total_timesteps} --seed ${seed}" >&2
eval "exec ${script} --env-id \"\${env_id}\" --total-timesteps \"\${total_timesteps}\" --seed \"\${seed}\""
