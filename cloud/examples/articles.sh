# The CleanRL articles' commands in the order they are typed, on an account where
# prerequisites.sh has run and the image is pushed (python cloud/submit.py build
# --repository cleanrl). Run from the repository root.
set -euo pipefail
aws batch create-compute-environment \
  --cli-input-json file://cloud/examples/compute_env.json
# a queue takes only a VALID compute environment: wait until Batch has made it
while status="$(aws batch describe-compute-environments \
    --compute-environments cleanrl-cpu-spot \
    --query 'computeEnvironments[0].status' --output text)"; [ "$status" != VALID ]; do
  if [ "$status" = INVALID ]; then
    echo "cleanrl-cpu-spot is INVALID; its statusReason says why" >&2; exit 1
  fi
  sleep 5
done
aws batch create-job-queue --cli-input-json file://cloud/examples/job_queue.json
# the job definition the articles submit to (cleanrl-ppo:1 on an account that never had one)
aws batch register-job-definition \
  --cli-input-json file://cloud/examples/job_definition_ppo.json
# the articles' last two commands, verbatim
aws batch submit-job --job-name cleanrl-ppo-experiment --job-queue cleanrl-queue --job-definition cleanrl-ppo:1 --parameters envId=PongNoFrameskip-v4,totalTimesteps=50000000
aws batch describe-jobs --jobs $(aws batch list-jobs --job-queue cleanrl-queue --job-status RUNNING --query 'jobSummaryList[*].jobId' --output text)
