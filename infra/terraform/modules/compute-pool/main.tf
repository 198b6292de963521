# One compute pool = one GPU shape: launch templates (ECS GPU AMI, IMDSv2, encrypted gp3) for the
# instance type and its alternates, an ASG that rests at 0 instances (optionally beside a warm pool
# of Stopped instances) and a capacity provider that scales it one instance at a time.

locals {
  # "primary" is the ASG's template; the controller points the group at an alternate's template
  # when the primary type has no capacity (no mixed instances policy: a warm pool refuses one).
  launch_types = merge({ primary = var.instance_type }, { for t in var.alternate_instance_types : t => t })
}

# The single template of earlier versions is the primary one.
moved {
  from = aws_launch_template.this
  to   = aws_launch_template.this["primary"]
}

# The ECS-optimized GPU AMI (Amazon Linux 2023), resolved at apply time from AWS's public parameter.
data "aws_ssm_parameter" "gpu_ami" {
  name = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
}

resource "aws_security_group" "instance" {
  name        = "${var.name}-instance"
  description = "GPU container instances of pool ${var.pool}: no inbound, HTTPS out"
  vpc_id      = var.vpc_id
  tags        = { Name = "${var.name}-instance" }
}

resource "aws_vpc_security_group_egress_rule" "instance_https" {
  security_group_id = aws_security_group.instance.id
  description       = "ECS agent, image pulls and S3 over HTTPS"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_launch_template" "this" {
  #checkov:skip=CKV_AWS_46:No secret is in the user data: it reads IMDSv2 session tokens at boot (the "token" checkov matches) and the weights come from S3 through the instance role.
  for_each = local.launch_types

  name_prefix            = each.key == "primary" ? "${var.name}-" : "${var.name}-${replace(each.value, ".", "-")}-"
  image_id               = data.aws_ssm_parameter.gpu_ami.value
  instance_type          = each.value
  vpc_security_group_ids = [aws_security_group.instance.id]
  update_default_version = true

  user_data = base64encode(templatefile("${path.module}/user_data.sh.tftpl", {
    cluster_name            = var.cluster_name
    pool                    = var.pool
    cache_path              = var.model_cache_path
    cache_on_instance_store = var.model_cache_on_instance_store
    warm_pool               = var.warm_pool != null
    prepare                 = try(var.warm_pool.prepare, false)
    hook_name               = local.prepare_hook
    asg_name                = var.name
    profiles                = var.prepare_profiles
    weights_bucket          = coalesce(var.weights_bucket, "unset")
  }))

  # The model server must not reach the instance role: IMDSv2 only, and a hop limit of 1 so that
  # no response crosses a container's extra network hop (the ECS agent uses the host network and
  # still reaches it); awsvpc tasks are cut off by ECS_AWSVPC_BLOCK_IMDS in the user data.

  iam_instance_profile {
    arn = var.instance_profile_arn
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  block_device_mappings {
    device_name = "/dev/xvda"

    ebs {
      volume_size = var.root_volume_gib
      volume_type = "gp3"
      # The model cache lives here: the default 125 MiB/s would take about 20 minutes per 150 GB.
      throughput            = var.cache_throughput_mibps
      iops                  = var.cache_iops
      encrypted             = true
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = { Name = var.name, "servingctl:pool" = var.pool, "servingctl:instance-type" = each.value }
  }

  tag_specifications {
    resource_type = "volume"
    tags          = { Name = var.name, "servingctl:pool" = var.pool, "servingctl:instance-type" = each.value }
  }
}

resource "aws_autoscaling_group" "this" {
  name                = var.name
  min_size            = 0
  max_size            = var.max_size
  desired_capacity    = 0
  vpc_zone_identifier = var.subnet_ids
  health_check_type   = "EC2"
  # Must match the capacity provider's setting: ECS refuses ENABLED termination protection otherwise.
  protect_from_scale_in = var.managed_termination_protection

  launch_template {
    id      = aws_launch_template.this["primary"].id
    version = aws_launch_template.this["primary"].latest_version
  }

  # Stopped instances beside the group: a start takes one (its volume keeps the image layers, the
  # weights and the vLLM compile cache) instead of launching and booting a new one. Stopped costs
  # the volume only. The ECS agent waits for ECS_WARM_POOLS_CHECK before it registers.
  dynamic "warm_pool" {
    for_each = var.warm_pool == null ? [] : [var.warm_pool]
    content {
      pool_state = "Stopped"
      min_size   = warm_pool.value.min_size
      # Each stopped instance pays for its volume: at most this many in the group and the pool.
      max_group_prepared_capacity = warm_pool.value.max_group_prepared_capacity
      instance_reuse_policy {
        reuse_on_scale_in = warm_pool.value.reuse_on_scale_in
      }
    }
  }

  # Required by ECS managed scaling.
  tag {
    key                 = "AmazonECSManaged"
    value               = "true"
    propagate_at_launch = true
  }

  # The controller's IAM conditions key on this tag.
  tag {
    key                 = "servingctl:pool"
    value               = var.pool
    propagate_at_launch = true
  }

  tag {
    key                 = "Name"
    value               = var.name
    propagate_at_launch = true
  }

  lifecycle {
    # The controller and the capacity provider own the desired capacity.
    ignore_changes = [desired_capacity]
  }
}

resource "aws_ecs_capacity_provider" "this" {
  name = var.name

  auto_scaling_group_provider {
    auto_scaling_group_arn         = aws_autoscaling_group.this.arn
    managed_termination_protection = var.managed_termination_protection ? "ENABLED" : "DISABLED"
    managed_draining               = "ENABLED"

    # Target 100 with step 1 and ASG max 1: scaling out from zero launches exactly one instance.
    managed_scaling {
      status                    = "ENABLED"
      target_capacity           = 100
      minimum_scaling_step_size = 1
      maximum_scaling_step_size = 1
      instance_warmup_period    = var.instance_warmup_s
    }
  }
}

data "aws_partition" "current" {}

locals {
  prepare_hook = "${var.name}-prepare"
  # The weights' key prefixes the prepare step syncs (only with a bucket to read them from).
  prepare_weights = var.weights_bucket == null ? [] : compact([for p in var.prepare_profiles : p.weights_key])
}

# The warm pool's prepare step: a new instance launched into the pool waits in Warmed:Pending:Wait
# while its user data pulls the images, syncs the weights and runs vLLM once (compile cache), then
# completes this hook (CONTINUE); it then stops into the pool. The hook applies again when the group
# takes the instance into service (Pending:Wait): the user data sees target lifecycle state
# InService and completes it at once. A prepare that never completes is abandoned (terminated).
resource "aws_autoscaling_lifecycle_hook" "prepare" {
  count = try(var.warm_pool.prepare, false) ? 1 : 0

  name                   = local.prepare_hook
  autoscaling_group_name = aws_autoscaling_group.this.name
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_LAUNCHING"
  default_result         = "ABANDON"
  heartbeat_timeout      = var.warm_pool.prepare_timeout_s
}

data "aws_iam_policy_document" "prepare" {
  count = try(var.warm_pool.prepare, false) ? 1 : 0

  statement {
    sid       = "CompleteThisGroupsHook"
    actions   = ["autoscaling:CompleteLifecycleAction"]
    resources = [aws_autoscaling_group.this.arn]
  }

  # The image and command of the pool's profiles as deployed. DescribeTaskDefinition has no
  # resource-level permissions (Service Authorization Reference): "*" only; read-only.
  statement {
    sid       = "ReadTaskDefinitions"
    actions   = ["ecs:DescribeTaskDefinition"]
    resources = ["*"]
  }

  dynamic "statement" {
    for_each = local.prepare_weights == [] ? [] : [1]
    content {
      sid       = "ReadThePoolsWeights"
      actions   = ["s3:GetObject"]
      resources = [for k in local.prepare_weights : "arn:${data.aws_partition.current.partition}:s3:::${var.weights_bucket}/${k}/*"]
    }
  }

  dynamic "statement" {
    for_each = local.prepare_weights == [] ? [] : [1]
    content {
      sid       = "ListThePoolsWeights"
      actions   = ["s3:ListBucket"]
      resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.weights_bucket}"]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = [for k in local.prepare_weights : "${k}/*"]
      }
    }
  }
}

resource "aws_iam_role_policy" "prepare" {
  count = try(var.warm_pool.prepare, false) ? 1 : 0

  name   = "${var.name}-warm-pool-prepare"
  role   = var.instance_role_name
  policy = data.aws_iam_policy_document.prepare[0].json
}
