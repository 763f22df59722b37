# Roles: the role of the container instances (ECS agent, ECR pulls, awslogs) and the Spot Fleet role of the Spot
# compute environments. AWS Batch itself uses its service-linked role AWSServiceRoleForBatch (batch.tf).

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "instance" {
  name               = "${var.name_prefix}-batch-instance"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
}

resource "aws_iam_role_policy_attachment" "instance" {
  role       = aws_iam_role.instance.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role"
}

resource "aws_iam_instance_profile" "instance" {
  name = "${var.name_prefix}-batch-instance"
  role = aws_iam_role.instance.name
}

data "aws_iam_policy_document" "spot_fleet_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["spotfleet.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "spot_fleet" {
  name               = "${var.name_prefix}-spot-fleet"
  assume_role_policy = data.aws_iam_policy_document.spot_fleet_assume.json
}

resource "aws_iam_role_policy_attachment" "spot_fleet" {
  role       = aws_iam_role.spot_fleet.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonEC2SpotFleetTaggingRole"
}

# The roles of the job containers. The job role is what the training container may do: read and write the runs
# bucket under its prefix, nothing else. The execution role is what ECS may do to start it: pull the image, write
# the logs, and (with var.wandb_secret_arn) read the W&B key, which ECS puts into the container as WANDB_API_KEY.
data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "job" {
  name               = "${var.name_prefix}-job"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

data "aws_iam_policy_document" "job" {
  statement {
    sid       = "ListTheRunsPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.runs.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${local.runs_prefix}/*"]
    }
  }
  statement {
    sid = "ReadAndWriteRuns"
    # DeleteObject: cloud/durable.py deletes a run's attempt that saved no checkpoint, and the completion marker of a
    # finished run that another command trains on (versioning keeps both for runs_noncurrent_days)
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.runs.arn}/${local.runs_prefix}/*"]
  }
}

resource "aws_iam_role_policy" "job" {
  name   = "runs-bucket"
  role   = aws_iam_role.job.id
  policy = data.aws_iam_policy_document.job.json
}

resource "aws_iam_role" "execution" {
  name               = "${var.name_prefix}-execution"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

data "aws_iam_policy_document" "wandb_secret" {
  statement {
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.wandb_secret_arn]
  }
}

resource "aws_iam_role_policy" "wandb_secret" {
  count  = var.wandb_secret_arn != "" ? 1 : 0
  name   = "wandb-secret"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.wandb_secret.json
}

# A tuning study's workers (cloud/submit.py submit-tune) read the study's store URL from Secrets Manager at run time,
# with the job role (var.tuner_storage_secret_arn).
data "aws_iam_policy_document" "tuner_storage_secret" {
  statement {
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.tuner_storage_secret_arn]
  }
}

resource "aws_iam_role_policy" "tuner_storage_secret" {
  count  = var.tuner_storage_secret_arn != "" ? 1 : 0
  name   = "tuner-storage-secret"
  role   = aws_iam_role.job.id
  policy = data.aws_iam_policy_document.tuner_storage_secret.json
}
