# One serving profile: the vLLM task definition (GPUs, ipc host, model cache, hub token, logs), the
# ECS service resting at 0 on its pool's capacity provider, the target group and the header rule.

data "aws_partition" "current" {}

locals {
  container_name = "vllm"
  # The Hugging Face cache directory inside the containers (host directory mounted there).
  hf_home = "/root/.cache/huggingface"
  # Hugging Face cache layout: hub/models--<org>--<name>; S3 holds the same tree under weights_prefix.
  model_cache_dir = "models--${replace(var.model_id, "/", "--")}"
  # Weights from S3: synced to the volume by the prefetch container, or streamed by vLLM itself.
  stream            = var.weights_source == "s3" && var.load_format == "runai_streamer"
  prefetch          = var.weights_source == "s3" && !local.stream
  weights_s3_prefix = "${trim(var.weights_prefix, "/")}/${local.model_cache_dir}"
  # A warm instance's volume may hold the weights already: a marker written after a complete sync
  # (per revision) skips even the listing of the bucket; s3 sync itself skips unchanged files.
  # The servingctl prefetch lines mark the prefetch's run in its log stream (the start timeline reads them).
  weights_marker   = "${local.hf_home}/hub/${local.model_cache_dir}/.servingctl-synced-${coalesce(var.revision, "unpinned")}"
  prefetch_command = "echo 'servingctl prefetch: syncing ${local.weights_s3_prefix}'; if [ -f ${local.weights_marker} ]; then echo 'weights already on the volume'; echo 'servingctl prefetch: done'; exit 0; fi; aws configure set default.s3.max_concurrent_requests 64 && aws s3 sync --only-show-errors s3://${coalesce(var.weights_bucket, "unset")}/${local.weights_s3_prefix} ${local.hf_home}/hub/${local.model_cache_dir} && touch ${local.weights_marker} && echo 'servingctl prefetch: done'"
  # vLLM's torch.compile and kernel caches on the cache volume: a warm instance keeps them.
  vllm_cache_root = "${local.hf_home}/vllm-cache"

  cache_mount = { sourceVolume = "model-cache", containerPath = local.hf_home, readOnly = false }
  log_options = {
    "awslogs-group"         = aws_cloudwatch_log_group.this.name
    "awslogs-region"        = var.region
    "awslogs-stream-prefix" = var.name
  }

  vllm_container = {
    name       = local.container_name
    image      = var.image
    essential  = true
    entryPoint = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    command    = local.vllm_args
    portMappings = [{
      containerPort = var.container_port
      protocol      = "tcp"
    }]
    resourceRequirements = [{ type = "GPU", value = tostring(var.vllm.tensor_parallel_size) }]
    mountPoints          = [local.cache_mount]
    environment = concat(
      [{ name = "VLLM_NO_USAGE_STATS", value = "1" }, { name = "VLLM_CACHE_ROOT", value = local.vllm_cache_root }],
      # Weights from S3 (prefetched or streamed): never reach the hub (and its NAT charges) at start.
      var.weights_source == "s3" ? [{ name = "HF_HUB_OFFLINE", value = "1" }] : [],
      # The streamer's S3 client: the task role's credentials (ECS credentials endpoint) in this region.
      local.stream ? [{ name = "AWS_REGION", value = var.region }, { name = "RUNAI_STREAMER_CONCURRENCY", value = "16" }] : [],
    )
    secrets   = var.hub_token_secret_arn == null ? [] : [{ name = "HF_TOKEN", valueFrom = var.hub_token_secret_arn }]
    dependsOn = local.prefetch ? [{ containerName = "prefetch-weights", condition = "SUCCESS" }] : []
    linuxParameters = {
      initProcessEnabled = true
    }
    ulimits = [{ name = "memlock", softLimit = -1, hardLimit = -1 }]
    logConfiguration = {
      logDriver = "awslogs"
      options   = local.log_options
    }
  }

  prefetch_container = {
    name        = "prefetch-weights"
    image       = var.prefetch_image
    essential   = false
    entryPoint  = ["/bin/sh", "-c"]
    command     = [local.prefetch_command]
    mountPoints = [local.cache_mount]
    logConfiguration = {
      logDriver = "awslogs"
      options   = local.log_options
    }
  }
}

resource "aws_cloudwatch_log_group" "this" {
  #checkov:skip=CKV_AWS_158:Model server logs hold no secrets; CloudWatch Logs encrypts them at rest with its own key.
  name              = "/ecs/${var.service_name}"
  retention_in_days = var.log_retention_days
}

data "aws_iam_policy_document" "tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

# Execution role: pull the image, write logs, read the hub token.
resource "aws_iam_role" "execution" {
  name               = "${var.service_name}-exec"
  assume_role_policy = data.aws_iam_policy_document.tasks_assume.json
}

locals {
  # Private ECR repositories of the images this task pulls (Docker Hub and public ECR need no grant).
  ecr_image_parts = [
    for image in [var.image, var.prefetch_image] : regex("^([0-9]{12})\\.dkr\\.ecr\\.([a-z0-9-]+)\\.amazonaws\\.com(\\.cn)?/([^:@]+)", image)
    if can(regex("^[0-9]{12}\\.dkr\\.ecr\\.", image))
  ]
  # The partition follows from the image's host and region (known at plan, unlike a data source's).
  pull_repositories = distinct([
    for m in local.ecr_image_parts :
    "arn:${m[2] != null ? "aws-cn" : startswith(m[1], "us-gov-") ? "aws-us-gov" : "aws"}:ecr:${m[1]}:${m[0]}:repository/${m[3]}"
  ])
}

# Instead of AmazonECSTaskExecutionRolePolicy (ECR pulls and log writes on every resource): this
# service's log group, and pulls only from the repositories its images name.
data "aws_iam_policy_document" "execution" {
  statement {
    sid       = "WriteThisServicesLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.this.arn}:*"]
  }
  dynamic "statement" {
    for_each = length(local.pull_repositories) > 0 ? [1] : []
    content {
      sid = "GetEcrToken"
      # GetAuthorizationToken has no resource-level permissions: it only grants a token.
      actions   = ["ecr:GetAuthorizationToken"]
      resources = ["*"]
    }
  }
  dynamic "statement" {
    for_each = length(local.pull_repositories) > 0 ? [1] : []
    content {
      sid       = "PullTheProfilesImages"
      actions   = ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]
      resources = local.pull_repositories
    }
  }
}

resource "aws_iam_role_policy" "execution" {
  name   = "pull-images-write-logs"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

data "aws_iam_policy_document" "hub_token" {
  count = var.hub_token_secret_arn == null ? 0 : 1

  statement {
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.hub_token_secret_arn]
  }
}

resource "aws_iam_role_policy" "hub_token" {
  count = var.hub_token_secret_arn == null ? 0 : 1

  name   = "read-hub-token"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.hub_token[0].json
}

# Task role: read this model's weights from S3 (the prefetch syncs them, or vLLM streams them); nothing else.
resource "aws_iam_role" "task" {
  name               = "${var.service_name}-task"
  assume_role_policy = data.aws_iam_policy_document.tasks_assume.json
}

data "aws_iam_policy_document" "weights" {
  count = local.prefetch || local.stream ? 1 : 0

  statement {
    actions   = ["s3:GetObject"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.weights_bucket}/${local.weights_s3_prefix}/*"]
  }

  statement {
    actions   = ["s3:ListBucket"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.weights_bucket}"]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${local.weights_s3_prefix}/*"]
    }
  }
}

resource "aws_iam_role_policy" "weights" {
  count = local.prefetch || local.stream ? 1 : 0

  name   = "read-model-weights"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.weights[0].json
}

resource "aws_ecs_task_definition" "this" {
  #checkov:skip=CKV_AWS_336:torch and Triton write kernel caches under the container filesystem; weights and the vLLM compile cache live on the mounted cache volume.
  family                   = var.service_name
  requires_compatibilities = ["EC2"]
  network_mode             = "awsvpc"
  # Tensor-parallel workers share memory through /dev/shm: host IPC avoids its small default size.
  ipc_mode           = "host"
  cpu                = tostring(var.task_cpu)
  memory             = tostring(var.task_memory_mib)
  execution_role_arn = aws_iam_role.execution.arn
  task_role_arn      = aws_iam_role.task.arn

  # The prefetch container exists only with S3 weights (a filtered for keeps one tuple type).
  container_definitions = jsonencode(concat([for c in [local.prefetch_container] : c if local.prefetch], [local.vllm_container]))

  volume {
    name      = "model-cache"
    host_path = var.model_cache_path
  }
}

resource "aws_lb_target_group" "this" {
  #checkov:skip=CKV_AWS_378:Plain HTTP between the internal ALB and the task inside the VPC; vLLM serves no TLS.
  name                 = substr("llm-${var.name}", 0, 32)
  port                 = var.container_port
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = var.deregistration_delay_s

  # Model load time is covered by the service's grace period (model_load_s), not by thresholds:
  # once loaded, 2 checks (30 s) mark the target healthy and 4 misses (60 s) unhealthy.
  health_check {
    enabled             = true
    path                = "/health"
    port                = "traffic-port"
    protocol            = "HTTP"
    matcher             = "200"
    interval            = 15
    timeout             = 10
    healthy_threshold   = 2
    unhealthy_threshold = 4
  }
}

resource "aws_lb_listener_rule" "this" {
  count        = var.wake_on_request ? 0 : 1
  listener_arn = var.listener_arn
  priority     = var.listener_priority

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.this.arn
  }

  condition {
    http_header {
      http_header_name = var.routing_header_name
      values           = [var.name]
    }
  }
}

moved {
  from = aws_lb_listener_rule.this
  to   = aws_lb_listener_rule.this[0]
}

# Wake on request: the profile rests at 0, so its rule starts at the waker; the controller moves the
# action (elasticloadbalancing:ModifyRule) to the model's target group once READY and back before any
# scale-in. Terraform owns the rule but not where it forwards: an apply must not flip it back.
resource "aws_lb_listener_rule" "wake" {
  count        = var.wake_on_request ? 1 : 0
  listener_arn = var.listener_arn
  priority     = var.listener_priority

  action {
    type             = "forward"
    target_group_arn = var.waker_target_group_arn
  }

  condition {
    http_header {
      http_header_name = var.routing_header_name
      values           = [var.name]
    }
  }

  lifecycle {
    ignore_changes = [action]
  }
}

resource "aws_ecs_service" "this" {
  name            = var.service_name
  cluster         = var.cluster_arn
  task_definition = aws_ecs_task_definition.this.arn
  desired_count   = 0
  # One task per GPU instance: the old task must stop before a new one fits.
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100
  health_check_grace_period_seconds  = var.model_load_s
  enable_ecs_managed_tags            = true
  propagate_tags                     = "SERVICE"
  # The reconciler finds running capacity by these tags even when the registry no longer names the profile.
  tags = {
    "servingctl:profile" = var.name
    "servingctl:pool"    = var.pool
  }

  capacity_provider_strategy {
    capacity_provider = var.capacity_provider
    weight            = 1
    base              = 0
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = var.task_security_group_ids
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.this.arn
    container_name   = local.container_name
    container_port   = var.container_port
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  lifecycle {
    # The controller and service auto scaling own the desired count (0 at rest, min_replicas and up while running).
    ignore_changes = [desired_count]
  }

  # A target group must be attached to the load balancer before a service can use it.
  depends_on = [aws_lb_listener_rule.this, aws_lb_listener_rule.wake]
}

# Replicas: ECS service auto scaling between the controller's floor and max_replicas while the
# profile runs. Terraform registers the target at 0..0 (the profile rests stopped); the controller
# raises it to min_replicas..max_replicas at start and back to 0..0 at stop, so auto scaling can
# neither keep a stopped profile up nor take a running one below min_replicas.
resource "aws_appautoscaling_target" "replicas" {
  count = var.max_replicas > 1 ? 1 : 0

  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${element(split("/", var.cluster_arn), length(split("/", var.cluster_arn)) - 1)}/${aws_ecs_service.this.name}"
  min_capacity       = 0
  max_capacity       = 0

  lifecycle {
    # The controller owns the bounds at run time (0..0 at rest, min..max while running).
    ignore_changes = [min_capacity, max_capacity]
  }
}

resource "aws_appautoscaling_policy" "replicas" {
  count = var.max_replicas > 1 ? 1 : 0

  name               = "${var.service_name}-${var.scaling_metric}"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.replicas[0].service_namespace
  scalable_dimension = aws_appautoscaling_target.replicas[0].scalable_dimension
  resource_id        = aws_appautoscaling_target.replicas[0].resource_id

  target_tracking_scaling_policy_configuration {
    target_value       = var.scaling_target
    scale_in_cooldown  = var.scale_in_cooldown_s
    scale_out_cooldown = var.scale_out_cooldown_s

    dynamic "predefined_metric_specification" {
      for_each = var.scaling_metric == "alb-request-count" ? [1] : []
      content {
        predefined_metric_type = "ALBRequestCountPerTarget"
        resource_label         = "${var.alb_arn_suffix}/${aws_lb_target_group.this.arn_suffix}"
      }
    }

    dynamic "customized_metric_specification" {
      for_each = var.scaling_metric == "requests-per-replica" ? [1] : []
      content {
        # The sweep's gauge read: (running + waiting) / replicas that answered /metrics.
        namespace   = "servingctl"
        metric_name = "RequestsPerReplica"
        statistic   = "Average"
        dimensions {
          name  = "Profile"
          value = var.name
        }
      }
    }
  }
}
