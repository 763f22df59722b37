variable "region" {
  description = "AWS region for every resource."
  type        = string
  default     = "us-east-1"
}

variable "name_prefix" {
  description = "Prefix of every resource name (compute environments, queues, job definitions, roles, repository)."
  type        = string
  default     = "cleanrl"
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{0,39}$", var.name_prefix))
    error_message = "name_prefix must be 1-40 lowercase letters, digits, '-' or '_' (ECR and Batch naming rules)."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = { project = "cleanrl" }
}

variable "vpc_id" {
  description = "Existing VPC that the compute environments run in."
  type        = string
}

variable "subnet_ids" {
  description = "Existing subnets of vpc_id for the instances; they need a route to ECR, CloudWatch and W&B (NAT or public IPs)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) > 0
    error_message = "subnet_ids must name at least one subnet."
  }
}

variable "cpu_instance_types" {
  description = "Instance types (or families) of the CPU compute environments."
  type        = list(string)
  default     = ["c6i", "c5"]
}

variable "gpu_instance_types" {
  description = "Instance types (or families) of the GPU compute environments."
  type        = list(string)
  default     = ["g5", "g4dn"]
}

variable "cpu_max_vcpus" {
  description = "Upper bound of vCPUs that each CPU compute environment (on-demand, spot) scales to; this caps the cost."
  type        = number
  default     = 256
}

variable "gpu_max_vcpus" {
  description = "Upper bound of vCPUs that each GPU compute environment (on-demand, spot) scales to; this caps the cost."
  type        = number
  default     = 64
}

variable "spot_bid_percentage" {
  description = "Highest Spot price accepted, as a percentage of the On-Demand price."
  type        = number
  default     = 100
  validation {
    condition     = var.spot_bid_percentage >= 1 && var.spot_bid_percentage <= 100
    error_message = "spot_bid_percentage must be between 1 and 100."
  }
}

variable "image" {
  description = "Container image of the job definitions; empty means the ECR repository's :latest tag (push it with cloud/submit.py build)."
  type        = string
  default     = ""
}

variable "job_vcpus" {
  description = "Default vCPUs of one single-container job (submit.py --vcpus overrides it per job)."
  type        = number
  default     = 2
}

variable "job_memory_mib" {
  description = "Default memory in MiB of one single-container job (submit.py --memory overrides it per job)."
  type        = number
  default     = 4096
}

variable "multinode_num_nodes" {
  description = "Default number of nodes of the multi-node parallel job (submit.py --num-nodes overrides it)."
  type        = number
  default     = 2
}

variable "multinode_gpus_per_node" {
  description = "GPUs of each node of the multi-node parallel job; torchrun starts one process per GPU."
  type        = number
  default     = 1
}

variable "multinode_vcpus_per_node" {
  description = "vCPUs of each node of the multi-node parallel job."
  type        = number
  default     = 4
}

variable "multinode_memory_mib" {
  description = "Memory in MiB of each node of the multi-node parallel job."
  type        = number
  default     = 15000
}

variable "job_attempts" {
  description = "Attempts of a job; a Spot reclaim (status reason 'Host EC2*') is retried, any other failure is not."
  type        = number
  default     = 3
  validation {
    condition     = var.job_attempts >= 1 && var.job_attempts <= 10
    error_message = "job_attempts must be between 1 and 10 (AWS Batch limit)."
  }
}

variable "job_timeout_seconds" {
  description = "A job attempt running longer than this is stopped."
  type        = number
  default     = 172800
}

variable "log_retention_days" {
  description = "Days the CloudWatch log group keeps job logs."
  type        = number
  default     = 30
}

variable "ecr_force_delete" {
  description = "If true, terraform destroy also deletes the ECR repository when it still holds images."
  type        = bool
  default     = false
}
