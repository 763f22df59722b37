# One-time set-up with the plain AWS CLI (the same resources as `terraform apply` in cloud/, CPU Spot only).
# First edit compute_env.json (subnets, security group, account id 111122223333) and the image of
# job_definition*.json; run from the repository root.
set -euo pipefail
aws iam create-role --role-name cleanrl-batch-service --assume-role-policy-document file://cloud/examples/trust_batch.json
aws iam attach-role-policy --role-name cleanrl-batch-service --policy-arn arn:aws:iam::aws:policy/service-role/AWSBatchServiceRole
aws iam create-role --role-name cleanrl-batch-instance --assume-role-policy-document file://cloud/examples/trust_ec2.json
aws iam attach-role-policy --role-name cleanrl-batch-instance --policy-arn arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role
aws iam create-instance-profile --instance-profile-name cleanrl-batch-instance
aws iam add-role-to-instance-profile --instance-profile-name cleanrl-batch-instance --role-name cleanrl-batch-instance
aws ecr create-repository --repository-name cleanrl
aws logs create-log-group --log-group-name /aws/batch/cleanrl
aws batch create-compute-environment --cli-input-json file://cloud/examples/compute_env.json
until [ "$(aws batch describe-compute-environments --compute-environments cleanrl-cpu-spot --query 'computeEnvironments[0].status' --output text)" = VALID ]; do sleep 5; done
aws batch create-job-queue --cli-input-json file://cloud/examples/job_queue.json
aws batch register-job-definition --cli-input-json file://cloud/examples/job_definition.json
aws batch register-job-definition --cli-input-json file://cloud/examples/job_definition_multinode.json
