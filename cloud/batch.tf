locals {
  # One managed compute environment and one job queue per (hardware, pricing) pair. Queues are kept
  # apart rather than chained Spot-then-On-Demand so that a job's price is what its queue says.
  environments = {
    cpu-ondemand = { instance_types = var.cpu_instance_types, max_vcpus = var.cpu_max_vcpus, spot = false, gpu = false }
    cpu-spot     = { instance_types = var.cpu_instance_types, max_vcpus = var.cpu_max_vcpus, spot = true, gpu = false }
    gpu-ondemand = { instance_types = var.gpu_instance_types, max_vcpus = var.gpu_max_vcpus, spot = false, gpu = true }
    gpu-spot     = { instance_types = var.gpu_instance_types, max_vcpus = var.gpu_max_vcpus, spot = true, gpu = true }
  }
}

resource "aws_batch_compute_environment" "this" {
  for_each                 = local.environments
  compute_environment_name = "${var.name_prefix}-${each.key}"
  type                     = "MANAGED"
  service_role             = aws_iam_role.batch_service.arn

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
    subnets             = var.subnet_ids

    ec2_configuration {
      # The GPU AMI carries the NVIDIA driver and container toolkit.
      image_type = each.value.gpu ? "ECS_AL2_NVIDIA" : "ECS_AL2"
    }
  }

  depends_on = [aws_iam_role_policy_attachment.batch_service]

  lifecycle {
    # Batch scales desired vCPUs itself.
    ignore_changes = [compute_resources[0].desired_vcpus]
  }
}

resource "aws_batch_job_queue" "this" {
  for_each = local.environments
  name     = "${var.name_prefix}-${each.key}"
  state    = "ENABLED"
  priority = 1

  compute_environment_order {
    order               = 1
    compute_environment = aws_batch_compute_environment.this[each.key].arn
  }
}
