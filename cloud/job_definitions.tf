locals {
  image = var.image != "" ? var.image : "${aws_ecr_repository.this.repository_url}:latest"

  log_configuration = {
    logDriver = "awslogs"
    options = {
      "awslogs-group"         = aws_cloudwatch_log_group.this.name
      "awslogs-region"        = var.region
      "awslogs-stream-prefix" = var.name_prefix
    }
  }

  # A Spot reclaim ends the attempt with a status reason starting "Host EC2"; retry only that.
  retry_strategy = {
    attempts = var.job_attempts
    evaluate_on_exit = [
      { on_status_reason = "Host EC2*", action = "RETRY" },
      { on_reason = "*", action = "EXIT" },
    ]
  }
}

# One training run in one container: `bash -c <jobs/single.sh> SCRIPT ENV_ID TOTAL_TIMESTEPS SEED`,
# the arguments filled from the job's parameters. submit.py overrides them per job.
resource "aws_batch_job_definition" "single" {
  name                  = "${var.name_prefix}-single"
  type                  = "container"
  platform_capabilities = ["EC2"]
  propagate_tags        = true

  parameters = {
    script         = "python cleanrl/ppo.py"
    envId          = "CartPole-v1"
    totalTimesteps = "500000"
    seed           = "1"
  }

  container_properties = jsonencode({
    image   = local.image
    command = ["bash", "-c", file("${path.module}/jobs/single.sh"), "Ref::script", "Ref::envId", "Ref::totalTimesteps", "Ref::seed"]
    resourceRequirements = [
      { type = "VCPU", value = tostring(var.job_vcpus) },
      { type = "MEMORY", value = tostring(var.job_memory_mib) },
    ]
    environment      = [{ name = "PYTHONUNBUFFERED", value = "1" }]
    logConfiguration = local.log_configuration
  })

  retry_strategy {
    attempts = local.retry_strategy.attempts
    dynamic "evaluate_on_exit" {
      for_each = local.retry_strategy.evaluate_on_exit
      content {
        action           = evaluate_on_exit.value.action
        on_status_reason = lookup(evaluate_on_exit.value, "on_status_reason", null)
        on_reason        = lookup(evaluate_on_exit.value, "on_reason", null)
      }
    }
  }

  timeout {
    attempt_duration_seconds = var.job_timeout_seconds
  }
}

# torchrun across the nodes of a multi-node parallel job, one process per GPU of each node:
# `bash -c <jobs/multinode.sh> SCRIPT ENV_ID TOTAL_TIMESTEPS SEED NPROC_PER_NODE`; the script reads the
# node index, node count and main node address from the AWS_BATCH_JOB_* variables of each node.
resource "aws_batch_job_definition" "multinode" {
  name                  = "${var.name_prefix}-multinode"
  type                  = "multinode"
  platform_capabilities = ["EC2"]
  propagate_tags        = true

  parameters = {
    script         = "cleanrl/ppo_atari_multigpu.py"
    envId          = "BreakoutNoFrameskip-v4"
    totalTimesteps = "10000000"
    seed           = "1"
    nprocPerNode   = "gpu"
  }

  node_properties = jsonencode({
    mainNode = 0
    numNodes = var.multinode_num_nodes
    nodeRangeProperties = [{
      targetNodes = "0:"
      container = {
        image   = local.image
        command = ["bash", "-c", file("${path.module}/jobs/multinode.sh"), "Ref::script", "Ref::envId", "Ref::totalTimesteps", "Ref::seed", "Ref::nprocPerNode"]
        resourceRequirements = [
          { type = "VCPU", value = tostring(var.multinode_vcpus_per_node) },
          { type = "MEMORY", value = tostring(var.multinode_memory_mib) },
          { type = "GPU", value = tostring(var.multinode_gpus_per_node) },
        ]
        environment      = [{ name = "PYTHONUNBUFFERED", value = "1" }]
        logConfiguration = local.log_configuration
      }
    }]
  })

  retry_strategy {
    attempts = local.retry_strategy.attempts
    dynamic "evaluate_on_exit" {
      for_each = local.retry_strategy.evaluate_on_exit
      content {
        action           = evaluate_on_exit.value.action
        on_status_reason = lookup(evaluate_on_exit.value, "on_status_reason", null)
        on_reason        = lookup(evaluate_on_exit.value, "on_reason", null)
      }
    }
  }

  timeout {
    attempt_duration_seconds = var.job_timeout_seconds
  }
}
