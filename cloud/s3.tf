# The bucket the jobs keep their runs/ in: s3://BUCKET/runs/JOB_ID/runs/... (cloud/durable.py). Encrypted at rest,
# versioned (a checkpoint overwritten by a broken upload can be recovered), never public, reached over TLS only; older versions and
# unfinished multipart uploads are deleted after a while.
data "aws_caller_identity" "current" {}

locals {
  runs_bucket = var.runs_bucket_name != "" ? var.runs_bucket_name : "${var.name_prefix}-runs-${data.aws_caller_identity.current.account_id}-${var.region}"
  runs_prefix = "runs"
}

# `terraform destroy` refuses to run at all while this bucket is in the state, before it changes anything: it would
# otherwise first remove the bucket's encryption, public access block, TLS-only policy, lifecycle rule and
# versioning (they depend on the bucket, so they go first) and only then fail on a bucket that still holds runs.
# docs/cloud.md, "Tearing down", takes the bucket out of the state first, so the rest goes and the bucket stays.
resource "aws_s3_bucket" "runs" {
  bucket = local.runs_bucket
  lifecycle {
    prevent_destroy = true
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "runs" {
  bucket = aws_s3_bucket.runs.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_versioning" "runs" {
  bucket = aws_s3_bucket.runs.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_public_access_block" "runs" {
  bucket                  = aws_s3_bucket.runs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# Requests over plain HTTP are refused, whoever makes them: every read and write of runs goes over TLS.
data "aws_iam_policy_document" "runs_tls_only" {
  statement {
    sid       = "TLSOnly"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.runs.arn, "${aws_s3_bucket.runs.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "runs" {
  bucket     = aws_s3_bucket.runs.id
  policy     = data.aws_iam_policy_document.runs_tls_only.json
  depends_on = [aws_s3_bucket_public_access_block.runs]
}

resource "aws_s3_bucket_lifecycle_configuration" "runs" {
  bucket = aws_s3_bucket.runs.id
  rule {
    id     = "old-versions-and-unfinished-uploads"
    status = "Enabled"
    filter {
      prefix = "${local.runs_prefix}/"
    }
    noncurrent_version_expiration {
      noncurrent_days = var.runs_noncurrent_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }
  depends_on = [aws_s3_bucket_versioning.runs]
}
