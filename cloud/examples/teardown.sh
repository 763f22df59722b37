# Remove what setup.sh (and prerequisites.sh) created, except the runs bucket (it holds the results; see
# docs/cloud.md to delete it).
# Queues and compute environments are disabled, then deleted; each step waits for the previous one, as Batch
# applies them asynchronously.
set -euo pipefail
for revision in $(aws batch describe-job-definitions --status ACTIVE --query 'jobDefinitions[?starts_with(jobDefinitionName, `cleanrl-`)].jobDefinitionArn' --output text); do
  aws batch deregister-job-definition --job-definition "$revision"
done
for queue in cleanrl-queue cleanrl-cpu-spot; do
  aws batch update-job-queue --job-queue "$queue" --state DISABLED
  until [ "$(aws batch describe-job-queues --job-queues "$queue" --query 'jobQueues[0].status' --output text)" = VALID ]; do sleep 5; done
  aws batch delete-job-queue --job-queue "$queue"
  until [ "$(aws batch describe-job-queues --job-queues "$queue" --query 'length(jobQueues)' --output text)" = 0 ]; do sleep 5; done
done
aws batch update-compute-environment --compute-environment cleanrl-cpu-spot --state DISABLED
until [ "$(aws batch describe-compute-environments --compute-environments cleanrl-cpu-spot --query 'computeEnvironments[0].status' --output text)" = VALID ]; do sleep 5; done
aws batch delete-compute-environment --compute-environment cleanrl-cpu-spot
until [ "$(aws batch describe-compute-environments --compute-environments cleanrl-cpu-spot --query 'length(computeEnvironments)' --output text)" = 0 ]; do sleep 5; done
aws ec2 delete-launch-template --launch-template-name cleanrl-batch >/dev/null
aws logs delete-log-group --log-group-name /aws/batch/cleanrl
aws ecr delete-repository --repository-name cleanrl --force
aws iam remove-role-from-instance-profile --instance-profile-name cleanrl-batch-instance --role-name cleanrl-batch-instance
aws iam delete-instance-profile --instance-profile-name cleanrl-batch-instance
aws iam detach-role-policy --role-name cleanrl-batch-instance --policy-arn arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role
aws iam delete-role --role-name cleanrl-batch-instance
aws iam detach-role-policy --role-name cleanrl-batch-service --policy-arn arn:aws:iam::aws:policy/service-role/AWSBatchServiceRole
aws iam delete-role --role-name cleanrl-batch-service
aws iam delete-role-policy --role-name cleanrl-job --policy-name runs-bucket
aws iam delete-role --role-name cleanrl-job
aws iam detach-role-policy --role-name cleanrl-execution --policy-arn arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy
aws iam delete-role --role-name cleanrl-execution
