# The command of the `cleanrl-ppo` job definition (the one of the CleanRL articles), run as:
#   bash -c "$(cat ppo.sh)" ENV_ID TOTAL_TIMESTEPS SEED CHECKPOINT_FREQUENCY EXTRA_ARGS
# AWS Batch fills the arguments from the job's parameters (Ref::envId, Ref::totalTimesteps, Ref::seed,
# Ref::checkpointFrequency, Ref::extraArgs); only envId and totalTimesteps need giving:
#   aws batch submit-job ... --job-definition cleanrl-ppo:1 --parameters envId=PongNoFrameskip-v4,totalTimesteps=50000000
# The env id picks the PPO script: Atari ids (ALE/<Game>-v5, <Game>NoFrameskip-v4) ppo_atari.py, continuous-action
# ids (MuJoCo, Pendulum, ...) ppo_continuous_action.py, the others (CartPole-v1, ...) ppo.py. The run goes through
# cloud/durable.py with checkpoints and --resume auto, as in single.sh.
set -euo pipefail
env_id="$0"
total_timesteps="$1"
seed="$2"
checkpoint_frequency="$3"
extra_args="$4"
code="${CLEANRL_CODE:-/workspace}"
case "${env_id}" in
  ALE/* | *NoFrameskip-v4) script=ppo_atari.py ;;
  HalfCheetah-* | Hopper-* | Walker2d-* | Ant-* | Humanoid-* | HumanoidStandup-* | Swimmer-* | Reacher-* | Pusher-* | \
    InvertedPendulum-* | InvertedDoublePendulum-* | Pendulum-* | MountainCarContinuous-* | \
    LunarLanderContinuous-* | BipedalWalker-* | BipedalWalkerHardcore-*) script=ppo_continuous_action.py ;;
  *) script=ppo.py ;;
esac
seed=$((seed + ${AWS_BATCH_JOB_ARRAY_INDEX:-0}))
echo "cleanrl job: ${script} --env-id ${env_id} --total-timesteps ${total_timesteps} --seed ${seed} ${extra_args}" >&2
# EXTRA_ARGS is shell text (flags with quotes), hence eval; the other values are passed as single words.
eval "exec python \"\${code}/cloud/durable.py\" -- python \"\${code}/cleanrl/\${script}\" --env-id \"\${env_id}\" \
  --total-timesteps \"\${total_timesteps}\" --seed \"\${seed}\" \
  --save-model --checkpoint-frequency \"\${checkpoint_frequency}\" --resume auto ${extra_args}"
