output "job_queues" {
  description = "Job queue names by kind: cpu-ondemand, cpu-spot, gpu-ondemand, gpu-spot, gpu-multinode, and default ({name_prefix}-queue)."
  value       = { for k, q in aws_batch_job_queue.this : k => q.name }
}

output "compute_environments" {
  description = "Compute environment names by kind."
  value       = { for k, c in aws_batch_compute_environment.this : k => c.compute_environment_name }
}

output "single_job_definition" {
  description = "Name of the single-container job definition (one run per job or per array child)."
  value       = aws_batch_job_definition.single.name
}

output "ppo_job_definition" {
  description = "Name of the job definition of the CleanRL articles (parameters envId and totalTimesteps)."
  value       = aws_batch_job_definition.ppo.name
}

output "multinode_job_definition" {
  description = "Name of the multi-node parallel job definition (torchrun across nodes)."
  value       = aws_batch_job_definition.multinode.name
}

output "runs_bucket" {
  description = "S3 bucket of the jobs' runs/: s3://BUCKET/runs/JOB_ID/ (download one with aws s3 sync)."
  value       = aws_s3_bucket.runs.bucket
}

output "ecr_repository_url" {
  description = "Where cloud/submit.py build pushes the image (tags :<git sha> and :latest)."
  value       = aws_ecr_repository.this.repository_url
}

output "log_group" {
  description = "CloudWatch log group of the jobs."
  value       = aws_cloudwatch_log_group.this.name
}

# cloud/submitter_policy.json names the default set-up (account 111122223333, us-east-1, name_prefix cleanrl); this is
# the same policy for this one.
output "submitter_policy" {
  description = "The IAM policy (JSON) a user of cloud/submit.py needs for this set-up: attach it to whoever submits."
  value = replace(replace(replace(replace(file("${path.module}/submitter_policy.json"),
    "cleanrl-runs-111122223333-us-east-1", aws_s3_bucket.runs.bucket),
    ":111122223333:", ":${data.aws_caller_identity.current.account_id}:"),
    ":us-east-1:", ":${var.region}:"),
  "/cleanrl", "/${var.name_prefix}")
}
