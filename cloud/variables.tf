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
  description = "Tags added to every resource, the EC2 instances and volumes of the compute environments included."
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
  description = "Instance types (or families) of the single-job GPU compute environments (gpu-ondemand, gpu-spot)."
  type        = list(string)
  default     = ["g5", "g4dn"]
}

variable "multinode_instance_types" {
  description = "Instance types of the multi-node compute environment (gpu-multinode): 8-GPU machines, so that a node of 8 GPUs fits one instance (g5.48xlarge: 192 vCPUs, 768 GiB; g6e.48xlarge: 192 vCPUs, 1536 GiB; p4d.24xlarge: 96 vCPUs, 1152 GiB)."
  type        = list(string)
  default     = ["g5.48xlarge", "g6e.48xlarge", "p4d.24xlarge"]
}

variable "multinode_instance_type" {
  description = "The one instance type of every node of a multi-node job (the job definition's instanceType): one of multinode_instance_types. The nodes' ranks step in lockstep, so one slower GPU would hold all back."
  type        = string
  default     = "g5.48xlarge"
}

variable "multinode_subnet_ids" {
  description = "Subnets of the multi-node compute environment (gpu-multinode), all in one Availability Zone; empty means the subnets of subnet_ids in the first one's zone. Multi-node jobs run in the awsvpc network mode, whose network interfaces get no public IP: outside the VPC their containers reach only S3 (through the S3 gateway endpoint, s3_gateway_endpoint) unless these are private subnets behind a NAT gateway, which W&B (--track) needs."
  type        = list(string)
  default     = []
}

variable "multinode_placement_group" {
  description = "Cluster placement group of the multi-node compute environment: empty makes one, {name_prefix}-multinode; a name uses that existing group (aws ec2 create-placement-group --group-name NAME --strategy cluster); \"none\": no group. It keeps the nodes of a job close, in their one Availability Zone."
  type        = string
  default     = ""
}

variable "s3_gateway_endpoint" {
  description = "If true, an S3 gateway endpoint on the route tables of subnet_ids and multinode_subnet_ids, so that multi-node jobs (no public IP) reach the runs bucket without a NAT gateway. Set false when those route tables already route S3 through a gateway endpoint."
  type        = bool
  default     = true
}

variable "multinode_max_vcpus" {
  description = "Upper bound of vCPUs of the multi-node compute environment. It must hold every node of a job at once: 384 places 2 nodes of the largest default type (2 x 192); 2 x 8-GPU nodes never start below 2 x the type's vCPUs. This caps the cost."
  type        = number
  default     = 384
}

variable "root_volume_gib" {
  description = "Root volume (GiB, gp3, encrypted) of every instance: the image with PyTorch's CUDA libraries and the runs/ of the jobs live there (the AMI's default of 30 GiB fills up)."
  type        = number
  default     = 200
  validation {
    condition     = var.root_volume_gib >= 30 && var.root_volume_gib <= 16384
    error_message = "root_volume_gib must be between 30 and 16384."
  }
}

variable "root_volume_throughput" {
  description = "Throughput (MiB/s) of every instance's gp3 root volume, where a run writes its checkpoints: 125 is gp3's baseline, free; each MiB/s above costs extra (docs/cloud.md, Large checkpoints: 500 lets PPG's 6 GiB signal checkpoint or a DQN --save-buffer one be written and uploaded within a Spot notice's two minutes)."
  type        = number
  default     = 125
  validation {
    # gp3 allows 125-1000 MiB/s, at most 0.25 MiB/s per provisioned IOPS: iops below keeps to that
    condition     = var.root_volume_throughput >= 125 && var.root_volume_throughput <= 1000
    error_message = "root_volume_throughput must be between 125 and 1000 (MiB/s, gp3)."
  }
}

variable "unplaceable_job_cancel_seconds" {
  description = "A job RUNNABLE this long although no instance of its compute environment can ever hold it (it asks for more vCPUs, memory or GPUs than any instance type has, or than max_vcpus allows) is cancelled, instead of waiting forever (600-86400)."
  type        = number
  default     = 1800
  validation {
    condition     = var.unplaceable_job_cancel_seconds >= 600 && var.unplaceable_job_cancel_seconds <= 86400
    error_message = "unplaceable_job_cancel_seconds must be between 600 and 86400 (AWS Batch limits)."
  }
}

variable "no_capacity_job_cancel_seconds" {
  description = "A job RUNNABLE this long because EC2 has no capacity of its compute environment's instance types (AWS Batch's status reason CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY) is cancelled (600-86400); resubmit it later or elsewhere."
  type        = number
  default     = 14400
  validation {
    condition     = var.no_capacity_job_cancel_seconds >= 600 && var.no_capacity_job_cancel_seconds <= 86400
    error_message = "no_capacity_job_cancel_seconds must be between 600 and 86400 (AWS Batch limits)."
  }
}

variable "default_queue_environment" {
  description = "Compute environment of the job queue {name_prefix}-queue (cleanrl-queue, the queue of the CleanRL articles' commands): cpu-ondemand, cpu-spot, gpu-ondemand or gpu-spot."
  type        = string
  default     = "gpu-spot"
  validation {
    condition     = contains(["cpu-ondemand", "cpu-spot", "gpu-ondemand", "gpu-spot"], var.default_queue_environment)
    error_message = "default_queue_environment must be one of cpu-ondemand, cpu-spot, gpu-ondemand, gpu-spot."
  }
}

variable "cpu_max_vcpus" {
  description = "Upper bound of vCPUs that each CPU compute environment (on-demand, spot) scales to; this caps the cost."
  type        = number
  default     = 256
}

variable "gpu_max_vcpus" {
  description = "Upper bound of vCPUs that each single-job GPU compute environment (on-demand, spot) scales to; this caps the cost."
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
  description = "GPUs of each node of the multi-node parallel job; torchrun starts one process per GPU (submit.py --gpus overrides it per job)."
  type        = number
  default     = 8
}

variable "multinode_vcpus_per_gpu" {
  description = "vCPUs of a node per GPU (the envs of a rank step on the CPU): a node asks for multinode_gpus_per_node times this. 8 x 8 = 64 fits every default multinode instance type. submit.py scales --gpus with the same 8."
  type        = number
  default     = 8
}

variable "multinode_memory_mib_per_gpu" {
  description = "Memory in MiB of a node per GPU; 8 x 28000 MiB fits every default multinode instance type after the ECS agent's share. submit.py scales --gpus with the same 28000."
  type        = number
  default     = 28000
}

variable "job_shared_memory_mib" {
  description = "Size of /dev/shm of a single-container job in MiB: several local ranks under torchrun (--nproc-per-node > 1) exchange data through it with NCCL, which Docker's default of 64 MiB breaks. It counts toward the job's memory while used."
  type        = number
  default     = 2048
}

variable "multinode_shared_memory_mib" {
  description = "Size of /dev/shm of each node's container in MiB (Docker's default of 64 MiB breaks NCCL with several local ranks)."
  type        = number
  default     = 16384
}

variable "multinode_rendezvous_timeout_seconds" {
  description = "Seconds torchrun waits for every node of a job to join; nodes that pull a large image start minutes apart (torchrun's own default is 600)."
  type        = number
  default     = 1800
}

variable "nccl_socket_ifname" {
  description = "NCCL_SOCKET_IFNAME of the multi-node job: the interfaces NCCL may use; the default excludes loopback and the docker and ECS bridges, so NCCL picks the instance's network."
  type        = string
  default     = "^lo,docker,ecs"
}

variable "checkpoint_frequency" {
  description = "Default --checkpoint-frequency (updates between checkpoints) of the jobs; every job runs with --save-model and --resume auto, so a retried attempt continues from the last checkpoint."
  type        = number
  default     = 50
}

variable "runs_bucket_name" {
  description = "Name of the S3 bucket the jobs keep runs/ in (s3://BUCKET/runs/JOB_ID/); empty means {name_prefix}-runs-{account id}-{region}."
  type        = string
  default     = ""
}

variable "runs_noncurrent_days" {
  description = "Days S3 keeps an overwritten or deleted object's older versions (every checkpoint upload makes one) before deleting them."
  type        = number
  default     = 7
}

variable "wandb_secret_arn" {
  description = "ARN of a Secrets Manager secret holding your W&B API key (a plain string); empty: none. With it, every job gets WANDB_API_KEY from the secret through the execution role, and no key travels in a submit request."
  type        = string
  default     = ""
}

variable "tuner_storage_secret_arn" {
  description = "ARN of a Secrets Manager secret holding the store URL of a tuning study (docs/tuning.md); empty: none. With it, the jobs' role may read the secret, so the workers of `cloud/submit.py submit-tune` get the URL at run time and no password travels in a submit request."
  type        = string
  default     = ""
}

variable "job_attempts" {
  description = "Attempts of a job; a Spot reclaim (status reason 'Host EC2*'), a run stopped by SIGTERM (exit code 143), a run whose S3 transfers failed (exit code 75) and a container that failed to start (status reason 'Task failed to start', e.g. an image pull error) are retried, any other failure is not."
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

variable "ppo_vcpus" {
  description = "vCPUs of a job of the cleanrl-ppo job definition (the one of the CleanRL articles)."
  type        = number
  default     = 4
}

variable "ppo_memory_mib" {
  description = "Memory in MiB of a job of the cleanrl-ppo job definition; 14000 fits a 16 GiB instance (g5.xlarge, g4dn.xlarge) after the ECS agent's share."
  type        = number
  default     = 14000
}

variable "ppo_gpus" {
  description = "GPUs of a job of the cleanrl-ppo job definition (0 for a CPU queue; see default_queue_environment)."
  type        = number
  default     = 1
}
