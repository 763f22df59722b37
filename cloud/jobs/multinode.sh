# The command of every node of the multi-node parallel job definition, run as:
#   bash -c "$(cat multinode.sh)" SCRIPT ENV_ID TOTAL_TIMESTEPS SEED NPROC_PER_NODE CHECKPOINT_FREQUENCY
# AWS Batch fills the arguments from the job's parameters (Ref::script, Ref::envId, Ref::totalTimesteps,
# Ref::seed, Ref::nprocPerNode, Ref::checkpointFrequency). SCRIPT is the script torchrun starts plus any extra
# flags, e.g. "cleanrl/ppo_atari_multigpu.py --num-envs 8". torchrun runs under cloud/durable.py with checkpoints and
# --resume auto: the main node restores runs/ from S3 and uploads it; its rank 0 reads the checkpoint and sends it
# to the other ranks (the nodes share no filesystem). CLEANRL_RDZV_TIMEOUT: seconds torchrun waits for all nodes
# (default 1800: nodes that pull a large image start minutes apart).
set -euo pipefail
script="$0"
env_id="$1"
total_timesteps="$2"
seed="$3"
nproc_per_node="$4"
checkpoint_frequency="$5"
code="${CLEANRL_CODE:-/workspace}"
# Batch sets these on every node of a multi-node parallel job.
node_rank="${AWS_BATCH_JOB_NODE_INDEX:?not a multi-node parallel job: AWS_BATCH_JOB_NODE_INDEX is unset}"
nnodes="${AWS_BATCH_JOB_NUM_NODES:?not a multi-node parallel job: AWS_BATCH_JOB_NUM_NODES is unset}"
main_node_index="${AWS_BATCH_JOB_MAIN_NODE_INDEX:-0}"
if [ "${node_rank}" = "${main_node_index}" ]; then
  # Batch gives the main node's address to the child nodes only; the main node uses its own first
  # non-loopback address (torchrun's store on the main node listens on every interface anyway).
  master_addr="$(hostname -I 2>/dev/null | awk '{print $1}')"
  master_addr="${master_addr:-127.0.0.1}"
else
  master_addr="${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:?child node without AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS}"
fi
master_port="${MASTER_PORT:-29500}"
echo "cleanrl multi-node job: node ${node_rank}/${nnodes}, main node ${master_addr}:${master_port}" >&2
eval "exec python \"\${code}/cloud/durable.py\" -- torchrun --nnodes \"\${nnodes}\" --node-rank \"\${node_rank}\" \
  --nproc-per-node \"\${nproc_per_node}\" --master-addr \"\${master_addr}\" --master-port \"\${master_port}\" \
  --rdzv-conf \"timeout=\${CLEANRL_RDZV_TIMEOUT:-1800}\" \
  ${script} --env-id \"\${env_id}\" --total-timesteps \"\${total_timesteps}\" --seed \"\${seed}\" \
  --save-model --checkpoint-frequency \"\${checkpoint_frequency}\" --resume auto"
