# One-time set-up with the plain AWS CLI (the resources of `terraform apply` in cloud/, CPU Spot only): what
# prerequisites.sh makes (roles, runs bucket, repository, log group, launch template), the compute environment
# cleanrl-cpu-spot, the queues cleanrl-queue and cleanrl-cpu-spot on it, and the job definitions cleanrl-ppo
# (revision 1 on a fresh account: the one the CleanRL articles name), cleanrl-single and cleanrl-multinode.
# What exists already is left as it is, so setup.sh runs again without harm, also after the articles' commands.
# First replace the placeholders (docs/cloud.md lists them); run from the repository root.
set -euo pipefail
. cloud/examples/prerequisites.sh
if [ "$(aws batch describe-compute-environments --compute-environments cleanrl-cpu-spot --query 'length(computeEnvironments)' --output text)" = 0 ]; then
  aws batch create-compute-environment --cli-input-json file://cloud/examples/compute_env.json
fi
# a queue takes only a VALID compute environment (Batch creates it asynchronously)
while true; do
  status="$(aws batch describe-compute-environments --compute-environments cleanrl-cpu-spot --query 'computeEnvironments[0].[status,statusReason]' --output text)"
  case "${status}" in
    VALID*) break ;;
    CREATING* | UPDATING*) sleep 5 ;;
    *) echo "error: compute environment cleanrl-cpu-spot is ${status}" >&2; exit 1 ;;
  esac
done
queue() {  # NAME JSON_FILE
  if [ "$(aws batch describe-job-queues --job-queues "$1" --query 'length(jobQueues)' --output text)" = 0 ]; then
    aws batch create-job-queue --cli-input-json "file://$2"
  fi
}
queue cleanrl-queue cloud/examples/job_queue.json
queue cleanrl-cpu-spot cloud/examples/job_queue_cpu_spot.json
# a job definition is registered when it has no active revision (each registration makes a new revision)
definition() {  # NAME JSON_FILE
  if [ "$(aws batch describe-job-definitions --job-definition-name "$1" --status ACTIVE --query 'length(jobDefinitions)' --output text)" = 0 ]; then
    aws batch register-job-definition --cli-input-json "file://$2"
  fi
}
definition cleanrl-ppo cloud/examples/job_definition_ppo.json  # first: on a fresh account it is cleanrl-ppo:1
definition cleanrl-single cloud/examples/job_definition.json
definition cleanrl-multinode cloud/examples/job_definition_multinode.json
