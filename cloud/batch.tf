locals {
  # One managed compute environment and one job queue per (hardware, pricing) pair. Queues are kept
  # apart rather than chained Spot-then-On-Demand so that a job's price is what its queue says.
  # gpu-multinode holds the nodes of multi-node parallel jobs (On-Demand: Batch does not run them on Spot), on
  # 8-GPU instance types, with room for two such nodes.
  environments = {
    cpu-ondemand  = { instance_types = var.cpu_instance_types, max_vcpus = var.cpu_max_vcpus, spot = false, gpu = false }
    cpu-spot      = { instance_types = var.cpu_instance_types, max_vcpus = var.cpu_max_vcpus, spot = true, gpu = false }
    gpu-ondemand  = { instance_types = var.gpu_instance_types, max_vcpus = var.gpu_max_vcpus, spot = false, gpu = true }
    gpu-spot      = { instance_types = var.gpu_instance_types, max_vcpus = var.gpu_max_vcpus, spot = true, gpu = true }
    gpu-multinode = { instance_types = var.multinode_instance_types, max_vcpus = var.multinode_max_vcpus, spot = false, gpu = true }
  }
  # Job queues: one per compute environment, and {name_prefix}-queue (cleanrl-queue) for the articles' commands.
  queues = merge(
    { for k, _ in local.environments : k => { name = "${var.name_prefix}-${k}", environment = k } },
    { default = { name = "${var.name_prefix}-queue", environment = var.default_queue_environment } },
  )
}

# Every instance gets a larger encrypted root volume (the image holds PyTorch's CUDA libraries, and runs/ grows
# there), and the tags, which Batch itself puts on the instances only through compute_resources.tags. The user data
# (examples/user_data.mime, shared with the plain-CLI set-up) sets the ECS agent for Spot reclaims: instances that got
# an interruption notice take no new job (ECS_ENABLE_SPOT_INSTANCE_DRAINING), and a container that ECS stops gets
# 120 s between SIGTERM and SIGKILL (ECS_CONTAINER_STOP_TIMEOUT) for its last checkpoint and upload; the file says
# how 120 s was chosen. The instance metadata answers IMDSv2 requests only; a hop limit of 2 lets a job's container
# reach it too, where the image's entrypoint reads the Spot interruption notice.
resource "aws_launch_template" "batch" {
  name      = "${var.name_prefix}-batch"
  user_data = filebase64("${path.module}/examples/user_data.mime")
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }
  block_device_mappings {
    device_name = "/dev/xvda" # the root device of the ECS-optimized Amazon Linux AMIs
    ebs {
      volume_size           = var.root_volume_gib
      volume_type           = "gp3"
      throughput            = var.root_volume_throughput
      iops                  = max(3000, var.root_volume_throughput * 4) # gp3: 3000 free; 0.25 MiB/s per IOPS at most
      encrypted             = true
      delete_on_termination = true
    }
  }
  tag_specifications {
    resource_type = "volume"
    tags          = var.tags
  }
}

# No service_role: AWS Batch then acts through its service-linked role AWSServiceRoleForBatch (it creates the role in
# the account the first time, which needs iam:CreateServiceLinkedRole). Only with that role can AWS Batch update a
# compute environment's instance types, launch template (the root volume), AMI type, subnets or placement group in
# place; with a service role of one's own, each such change means a new compute environment, which AWS will not swap
# in while a queue uses the old one.
resource "aws_batch_compute_environment" "this" {
  for_each                 = local.environments
  compute_environment_name = "${var.name_prefix}-${each.key}"
  type                     = "MANAGED"

  compute_resources {
    type = each.value.spot ? "SPOT" : "EC2"
    # Spot: the pools least likely to be interrupted at the lowest price; On-Demand: the cheapest fit.
    allocation_strategy = each.value.spot ? "SPOT_PRICE_CAPACITY_OPTIMIZED" : "BEST_FIT_PROGRESSIVE"
    bid_percentage      = each.value.spot ? var.spot_bid_percentage : null
    spot_iam_fleet_role = each.value.spot ? aws_iam_role.spot_fleet.arn : null
    instance_role       = aws_iam_instance_profile.instance.arn
    instance_type       = each.value.instance_types
    min_vcpus           = 0
    max_vcpus           = each.value.max_vcpus
    security_group_ids  = [aws_security_group.batch.id]
    subnets             = each.key == "gpu-multinode" ? local.multinode_subnet_ids : var.subnet_ids
    # a cluster placement group keeps the nodes of a multi-node job close (network.tf, multinode_placement_group)
    placement_group = each.key == "gpu-multinode" ? local.multinode_placement_group : null
    tags            = merge(var.tags, { Name = "${var.name_prefix}-${each.key}" })

    launch_template {
      launch_template_id = aws_launch_template.batch.id
      version            = aws_launch_template.batch.latest_version
    }

    ec2_configuration {
      # The ECS-optimized Amazon Linux 2023 AMIs (AWS ends support of the Amazon Linux 2 ones on 30 June 2026); the
      # GPU one carries the NVIDIA driver and container toolkit.
      image_type = each.value.gpu ? "ECS_AL2023_NVIDIA" : "ECS_AL2023"
    }
  }

  lifecycle {
    # Batch scales desired vCPUs itself.
    ignore_changes = [compute_resources[0].desired_vcpus]
    precondition {
      condition     = each.key != "gpu-multinode" || length(local.multinode_zones) == 1
      error_message = "multinode_subnet_ids must all be in one Availability Zone: the nodes of a multi-node job run in one zone (and its placement group)."
    }
  }
}

resource "aws_batch_job_queue" "this" {
  for_each = local.queues
  name     = each.value.name
  state    = "ENABLED"
  priority = 1

  compute_environment_order {
    order               = 1
    compute_environment = aws_batch_compute_environment.this[each.value.environment].arn
  }

  # A job that no instance of the queue's compute environment can ever hold stays RUNNABLE for good (Batch's
  # own words for it: the MISCONFIGURATION status reasons); cancel it after a while instead. A job for which EC2 has
  # no instances to give (CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY: no Spot or On-Demand capacity of the instance
  # types in the subnets' zones) may wait as long: cancel it after a longer while, so that it neither waits for days
  # nor holds up the jobs behind it. (An instance quota too small for the job is not among the documented reasons:
  # docs/cloud.md, "GPU quotas and capacity", says how to check it before submitting.)
  dynamic "job_state_time_limit_action" {
    for_each = {
      "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT"         = var.unplaceable_job_cancel_seconds
      "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE" = var.unplaceable_job_cancel_seconds
      "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"           = var.no_capacity_job_cancel_seconds
    }
    content {
      action           = "CANCEL"
      max_time_seconds = job_state_time_limit_action.value
      reason           = job_state_time_limit_action.key
      state            = "RUNNABLE"
    }
  }
}
