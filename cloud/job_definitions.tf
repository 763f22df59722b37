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

  # What every job container gets: the roles (iam.tf), the runs bucket for cloud/durable.py, and the W&B key
  # from Secrets Manager when var.wandb_secret_arn names one.
  common = merge(
    {
      jobRoleArn       = aws_iam_role.job.arn
      executionRoleArn = aws_iam_role.execution.arn
      logConfiguration = local.log_configuration
    },
    var.wandb_secret_arn != "" ? { secrets = [{ name = "WANDB_API_KEY", valueFrom = var.wandb_secret_arn }] } : {},
  )
  environment = [
    { name = "PYTHONUNBUFFERED", value = "1" },
    { name = "CLEANRL_RUNS_S3", value = "s3://${aws_s3_bucket.runs.bucket}/${local.runs_prefix}" },
    # the attempt's time limit (the timeout below): cloud/durable.py stops the run with SIGTERM before it, so that the
    # run checkpoints and exits 143, which is retried; Batch's own timeout ends a job for good
    { name = "CLEANRL_TIME_LIMIT_SECONDS", value = tostring(var.job_timeout_seconds) },
  ]

  # A Spot reclaim ends the attempt with a status reason starting "Host EC2"; a run stopped by SIGTERM exits 143
  # (cloud/durable.py passes the signal on, the script checkpoints); cloud/durable.py exits 75 when S3 could not be
  # read at the start or the last upload failed (the results are not all saved); a container that could not start
  # (its image not pulled, say: CannotPullContainerError) ends with "Task failed to start". All four are retried
  # (Batch takes at most 5 rules), and the next attempt resumes from the checkpoint in S3; any other failure is not
  # retried. (Batch never retries a job stopped with
  # terminate-job or cancel-job, whatever its exit code.)
  retry_strategy = {
    attempts = var.job_attempts
    evaluate_on_exit = [
      { on_status_reason = "Host EC2*", action = "RETRY" },
      { on_exit_code = "143", action = "RETRY" },
      { on_exit_code = "75", action = "RETRY" },
      { on_status_reason = "Task failed to start", action = "RETRY" },
      { on_reason = "*", action = "EXIT" },
    ]
  }
}

# One training run in one container: `bash -c <jobs/single.sh> SCRIPT ENV_ID TOTAL_TIMESTEPS SEED FREQUENCY`,
# the arguments filled from the job's parameters. submit.py overrides them per job.
resource "aws_batch_job_definition" "single" {
  name                  = "${var.name_prefix}-single"
  type                  = "container"
  platform_capabilities = ["EC2"]
  propagate_tags        = true

  parameters = {
    script              = "python cleanrl/ppo.py"
    envId               = "CartPole-v1"
    totalTimesteps      = "500000"
    seed                = "1"
    checkpointFrequency = tostring(var.checkpoint_frequency)
  }

  container_properties = jsonencode(merge(local.common, {
    image   = local.image
    command = ["bash", "-c", file("${path.module}/jobs/single.sh"), "Ref::script", "Ref::envId", "Ref::totalTimesteps", "Ref::seed", "Ref::checkpointFrequency"]
    resourceRequirements = [
      { type = "VCPU", value = tostring(var.job_vcpus) },
      { type = "MEMORY", value = tostring(var.job_memory_mib) },
    ]
    environment     = local.environment
    linuxParameters = { sharedMemorySize = var.job_shared_memory_mib }
  }))

  retry_strategy {
    attempts = local.retry_strategy.attempts
    dynamic "evaluate_on_exit" {
      for_each = local.retry_strategy.evaluate_on_exit
      content {
        action           = evaluate_on_exit.value.action
        on_status_reason = lookup(evaluate_on_exit.value, "on_status_reason", null)
        on_exit_code     = lookup(evaluate_on_exit.value, "on_exit_code", null)
        on_reason        = lookup(evaluate_on_exit.value, "on_reason", null)
      }
    }
  }

  timeout {
    attempt_duration_seconds = var.job_timeout_seconds
  }
}

# The job definition of the CleanRL articles' commands: `--job-definition cleanrl-ppo:1 --parameters
# envId=PongNoFrameskip-v4,totalTimesteps=50000000`. `bash -c <jobs/ppo.sh> ENV_ID TOTAL_TIMESTEPS SEED FREQUENCY
# EXTRA_ARGS`; the env id picks ppo_atari.py, ppo_continuous_action.py or ppo.py.
resource "aws_batch_job_definition" "ppo" {
  name                  = "${var.name_prefix}-ppo"
  type                  = "container"
  platform_capabilities = ["EC2"]
  propagate_tags        = true

  parameters = {
    envId               = "CartPole-v1"
    totalTimesteps      = "1000000"
    seed                = "1"
    checkpointFrequency = tostring(var.checkpoint_frequency)
    extraArgs           = "--progress-interval 60"
  }

  container_properties = jsonencode(merge(local.common, {
    image   = local.image
    command = ["bash", "-c", file("${path.module}/jobs/ppo.sh"), "Ref::envId", "Ref::totalTimesteps", "Ref::seed", "Ref::checkpointFrequency", "Ref::extraArgs"]
    resourceRequirements = concat(
      [
        { type = "VCPU", value = tostring(var.ppo_vcpus) },
        { type = "MEMORY", value = tostring(var.ppo_memory_mib) },
      ],
      var.ppo_gpus > 0 ? [{ type = "GPU", value = tostring(var.ppo_gpus) }] : [],
    )
    environment = local.environment
  }))

  retry_strategy {
    attempts = local.retry_strategy.attempts
    dynamic "evaluate_on_exit" {
      for_each = local.retry_strategy.evaluate_on_exit
      content {
        action           = evaluate_on_exit.value.action
        on_status_reason = lookup(evaluate_on_exit.value, "on_status_reason", null)
        on_exit_code     = lookup(evaluate_on_exit.value, "on_exit_code", null)
        on_reason        = lookup(evaluate_on_exit.value, "on_reason", null)
      }
    }
  }

  timeout {
    attempt_duration_seconds = var.job_timeout_seconds
  }
}

# torchrun across the nodes of a multi-node parallel job, one process per GPU of each node:
# `bash -c <jobs/multinode.sh> SCRIPT ENV_ID TOTAL_TIMESTEPS SEED NPROC_PER_NODE FREQUENCY`; the script reads the
# node index, node count and main node address from the AWS_BATCH_JOB_* variables of each node. vCPUs and memory
# grow with the GPUs of a node; /dev/shm is enlarged for NCCL; NCCL keeps off loopback and the docker/ECS bridges.
# All nodes of a job run on one instance type (instanceType, var.multinode_instance_type): the ranks step in lockstep,
# so a slower GPU would hold every rank back.
resource "aws_batch_job_definition" "multinode" {
  name                  = "${var.name_prefix}-multinode"
  type                  = "multinode"
  platform_capabilities = ["EC2"]
  propagate_tags        = true

  parameters = {
    script              = "cleanrl/ppo_atari_multigpu.py"
    envId               = "BreakoutNoFrameskip-v4"
    totalTimesteps      = "10000000"
    seed                = "1"
    nprocPerNode        = "gpu"
    checkpointFrequency = tostring(var.checkpoint_frequency)
  }

  node_properties = jsonencode({
    mainNode = 0
    numNodes = var.multinode_num_nodes
    nodeRangeProperties = [{
      targetNodes = "0:"
      container = merge(local.common, {
        image        = local.image
        instanceType = var.multinode_instance_type
        command      = ["bash", "-c", file("${path.module}/jobs/multinode.sh"), "Ref::script", "Ref::envId", "Ref::totalTimesteps", "Ref::seed", "Ref::nprocPerNode", "Ref::checkpointFrequency"]
        resourceRequirements = [
          { type = "VCPU", value = tostring(var.multinode_gpus_per_node * var.multinode_vcpus_per_gpu) },
          { type = "MEMORY", value = tostring(var.multinode_gpus_per_node * var.multinode_memory_mib_per_gpu) },
          { type = "GPU", value = tostring(var.multinode_gpus_per_node) },
        ]
        linuxParameters = { sharedMemorySize = var.multinode_shared_memory_mib }
        environment = concat(local.environment, [
          { name = "NCCL_SOCKET_IFNAME", value = var.nccl_socket_ifname },
          { name = "CLEANRL_RDZV_TIMEOUT", value = tostring(var.multinode_rendezvous_timeout_seconds) },
        ])
      })
    }]
  })

  retry_strategy {
    attempts = local.retry_strategy.attempts
    dynamic "evaluate_on_exit" {
      for_each = local.retry_strategy.evaluate_on_exit
      content {
        action           = evaluate_on_exit.value.action
        on_status_reason = lookup(evaluate_on_exit.value, "on_status_reason", null)
        on_exit_code     = lookup(evaluate_on_exit.value, "on_exit_code", null)
        on_reason        = lookup(evaluate_on_exit.value, "on_reason", null)
      }
    }
  }

  timeout {
    attempt_duration_seconds = var.job_timeout_seconds
  }

  lifecycle {
    precondition {
      condition     = contains(var.multinode_instance_types, var.multinode_instance_type) || contains(var.multinode_instance_types, split(".", var.multinode_instance_type)[0])
      error_message = "multinode_instance_type must be one of multinode_instance_types, or of their families (the instance types of the gpu-multinode compute environment)."
    }
  }
}
