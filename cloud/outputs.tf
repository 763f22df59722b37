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
