# One-time set-up with the plain AWS CLI (the resources of `terraform apply` in cloud/, CPU Spot only): roles, the
# runs bucket, a compute environment, the queues cleanrl-cpu-spot and cleanrl-queue, and the job definitions
# cleanrl-single, cleanrl-ppo (revision 1: the one the CleanRL articles name) and cleanrl-multinode.
# First replace the placeholders (docs/cloud.md lists them): account id 111122223333 and region us-east-1 in the
# JSON files, the subnet and security group in compute_env.json; run from the repository root.
set -euo pipefail
ACCOUNT="$(aws sts get-caller-identity --query Account --output text)"
REGION="${AWS_REGION:-${AWS_DEFAULT_REGION:-$(aws configure get region)}}"
BUCKET="cleanrl-runs-${ACCOUNT}-${REGION}"
aws iam create-role --role-name cleanrl-batch-service --assume-role-policy-document file://cloud/examples/trust_batch.json
aws iam attach-role-policy --role-name cleanrl-batch-service --policy-arn arn:aws:iam::aws:policy/service-role/AWSBatchServiceRole
aws iam create-role --role-name cleanrl-batch-instance --assume-role-policy-document file://cloud/examples/trust_ec2.json
aws iam attach-role-policy --role-name cleanrl-batch-instance --policy-arn arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role
aws iam create-instance-profile --instance-profile-name cleanrl-batch-instance
aws iam add-role-to-instance-profile --instance-profile-name cleanrl-batch-instance --role-name cleanrl-batch-instance
# the runs bucket: encrypted, versioned, never public, old versions deleted after 7 days, TLS only
if [ "${REGION}" = us-east-1 ]; then
  aws s3api create-bucket --bucket "${BUCKET}"
else
  aws s3api create-bucket --bucket "${BUCKET}" --create-bucket-configuration "LocationConstraint=${REGION}"
fi
aws s3api put-bucket-encryption --bucket "${BUCKET}" --server-side-encryption-configuration '{"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}'
aws s3api put-bucket-versioning --bucket "${BUCKET}" --versioning-configuration Status=Enabled
aws s3api put-public-access-block --bucket "${BUCKET}" --public-access-block-configuration BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true
aws s3api put-bucket-lifecycle-configuration --bucket "${BUCKET}" --lifecycle-configuration file://cloud/examples/bucket_lifecycle.json
aws s3api put-bucket-policy --bucket "${BUCKET}" --policy "{\"Version\": \"2012-10-17\", \"Statement\": [{\"Sid\": \"TLSOnly\", \"Effect\": \"Deny\", \"Principal\": \"*\", \"Action\": \"s3:*\", \"Resource\": [\"arn:aws:s3:::${BUCKET}\", \"arn:aws:s3:::${BUCKET}/*\"], \"Condition\": {\"Bool\": {\"aws:SecureTransport\": \"false\"}}}]}"
# the job role (the runs bucket's runs/ prefix only) and the execution role (image, logs, a W&B secret)
aws iam create-role --role-name cleanrl-job --assume-role-policy-document file://cloud/examples/trust_ecs_tasks.json
aws iam put-role-policy --role-name cleanrl-job --policy-name runs-bucket --policy-document file://cloud/examples/job_role_policy.json
aws iam create-role --role-name cleanrl-execution --assume-role-policy-document file://cloud/examples/trust_ecs_tasks.json
aws iam attach-role-policy --role-name cleanrl-execution --policy-arn arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy
aws ecr create-repository --repository-name cleanrl
aws logs create-log-group --log-group-name /aws/batch/cleanrl
aws batch create-compute-environment --cli-input-json file://cloud/examples/compute_env.json
until [ "$(aws batch describe-compute-environments --compute-environments cleanrl-cpu-spot --query 'computeEnvironments[0].status' --output text)" = VALID ]; do sleep 5; done
aws batch create-job-queue --cli-input-json file://cloud/examples/job_queue.json
aws batch create-job-queue --cli-input-json file://cloud/examples/job_queue_default.json
aws batch register-job-definition --cli-input-json file://cloud/examples/job_definition_ppo.json
aws batch register-job-definition --cli-input-json file://cloud/examples/job_definition.json
aws batch register-job-definition --cli-input-json file://cloud/examples/job_definition_multinode.json
