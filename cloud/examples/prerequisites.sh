# What the CleanRL articles' commands (cloud/examples/articles.sh) and setup.sh need first, made once with the plain
# AWS CLI: the roles, the runs bucket, the ECR repository, the log group and the launch template of the instances.
# Each is made only when it does not exist yet, so this runs again without harm (and updates the roles' trust
# policies). First replace the placeholders (docs/cloud.md lists them); run from the repository root.
set -euo pipefail
ACCOUNT="$(aws sts get-caller-identity --query Account --output text)"
REGION="${AWS_REGION:-${AWS_DEFAULT_REGION:-$(aws configure get region)}}"
BUCKET="cleanrl-runs-${ACCOUNT}-${REGION}"
role() {  # NAME TRUST_POLICY_FILE
  if aws iam get-role --role-name "$1" >/dev/null 2>&1; then
    aws iam update-assume-role-policy --role-name "$1" --policy-document "file://$2"
  else
    aws iam create-role --role-name "$1" --assume-role-policy-document "file://$2" >/dev/null
  fi
}
# the Batch service role and the role of the instances (attaching a policy that is attached already changes nothing)
role cleanrl-batch-service cloud/examples/trust_batch.json
aws iam attach-role-policy --role-name cleanrl-batch-service --policy-arn arn:aws:iam::aws:policy/service-role/AWSBatchServiceRole
role cleanrl-batch-instance cloud/examples/trust_ec2.json
aws iam attach-role-policy --role-name cleanrl-batch-instance --policy-arn arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role
aws iam get-instance-profile --instance-profile-name cleanrl-batch-instance >/dev/null 2>&1 \
  || aws iam create-instance-profile --instance-profile-name cleanrl-batch-instance >/dev/null
if [ "$(aws iam get-instance-profile --instance-profile-name cleanrl-batch-instance --query 'length(InstanceProfile.Roles)' --output text)" = 0 ]; then
  aws iam add-role-to-instance-profile --instance-profile-name cleanrl-batch-instance --role-name cleanrl-batch-instance
fi
# the runs bucket: encrypted, versioned, never public, old versions deleted after 7 days, TLS only
if ! aws s3api head-bucket --bucket "${BUCKET}" >/dev/null 2>&1; then
  if [ "${REGION}" = us-east-1 ]; then
    aws s3api create-bucket --bucket "${BUCKET}" >/dev/null
  else
    aws s3api create-bucket --bucket "${BUCKET}" --create-bucket-configuration "LocationConstraint=${REGION}" >/dev/null
  fi
fi
aws s3api put-bucket-encryption --bucket "${BUCKET}" --server-side-encryption-configuration '{"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}'
aws s3api put-bucket-versioning --bucket "${BUCKET}" --versioning-configuration Status=Enabled
aws s3api put-public-access-block --bucket "${BUCKET}" --public-access-block-configuration BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true
aws s3api put-bucket-lifecycle-configuration --bucket "${BUCKET}" --lifecycle-configuration file://cloud/examples/bucket_lifecycle.json
aws s3api put-bucket-policy --bucket "${BUCKET}" --policy "{\"Version\": \"2012-10-17\", \"Statement\": [{\"Sid\": \"TLSOnly\", \"Effect\": \"Deny\", \"Principal\": \"*\", \"Action\": \"s3:*\", \"Resource\": [\"arn:aws:s3:::${BUCKET}\", \"arn:aws:s3:::${BUCKET}/*\"], \"Condition\": {\"Bool\": {\"aws:SecureTransport\": \"false\"}}}]}"
# the job role (the runs bucket's runs/ prefix only) and the execution role (image, logs, a W&B secret)
role cleanrl-job cloud/examples/trust_ecs_tasks.json
aws iam put-role-policy --role-name cleanrl-job --policy-name runs-bucket --policy-document file://cloud/examples/job_role_policy.json
role cleanrl-execution cloud/examples/trust_ecs_tasks.json
aws iam attach-role-policy --role-name cleanrl-execution --policy-arn arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy
aws ecr describe-repositories --repository-names cleanrl >/dev/null 2>&1 \
  || aws ecr create-repository --repository-name cleanrl >/dev/null
if [ "$(aws logs describe-log-groups --log-group-name-prefix /aws/batch/cleanrl --query 'length(logGroups[?logGroupName==`/aws/batch/cleanrl`])' --output text)" = 0 ]; then
  aws logs create-log-group --log-group-name /aws/batch/cleanrl
fi
# the instances' launch template: a 200 GiB encrypted root volume, IMDSv2 only, and the ECS agent's settings for
# Spot reclaims in its user data (cloud/examples/user_data.mime, base64-encoded in the JSON file)
aws ec2 describe-launch-templates --launch-template-names cleanrl-batch >/dev/null 2>&1 \
  || aws ec2 create-launch-template --cli-input-json file://cloud/examples/launch_template.json >/dev/null
