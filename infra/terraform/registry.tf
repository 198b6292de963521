# The registry: one JSON document built from the same inputs as the resources and from their
# outputs, validated by tests against the package's registry schema, and published to SSM Parameter
# Store as one parameter per pool and per profile plus an index under /<name>/registry (one parameter
# holds at most 8 KB; the layout is the controller's servingctl.registry.layout).

locals {
  routing_header_name = "X-LLM-Profile"
  # Host directory of the Hugging Face cache (root EBS, or instance store when the pool asks).
  model_cache_path = "/var/lib/llm-model-cache"

  start_deadlines = {
    for name, profile in var.profiles : name => {
      capacity_timeout_s = profile.start.capacity_timeout_s
      # Image pull, plus one weights pass in case ECS reports RUNNING only after the prefetch.
      task_timeout_s = coalesce(profile.start.task_timeout_s, local.image_pull_allowance_s + coalesce(local.load[name].weights_pass_s, 0))
      # The controller must wait at least as long as ECS lets the model load, plus the
      # target group's healthy threshold (2 x 15 s) and margin.
      health_timeout_s = coalesce(profile.start.health_timeout_s, local.load[name].health_check_grace_s + 300)
    }
  }

  registry = {
    schema_version = 1
    region         = var.region
    pools = {
      for name, pool in var.pools : name => {
        asg_name           = module.pool[name].asg_name
        asg_arn            = module.pool[name].asg_arn
        capacity_provider  = module.pool[name].capacity_provider_name
        instance_type      = pool.instance_type
        gpu_count          = pool.gpu_count
        gpu_memory_gib     = try(var.gpu_shapes[pool.instance_type].gpu_memory_gib, null)
        price_key          = pool.price_key
        launch_template_id = module.pool[name].launch_template_id
        alternates         = module.pool[name].alternates
        # The root volume a warm (stopped) instance keeps paying for.
        volume = {
          size_gib         = pool.root_volume_gib
          throughput_mibps = pool.cache_throughput_mibps
          iops             = pool.cache_iops
        }
        warm_pool = pool.warm_pool == null ? null : merge(pool.warm_pool, { pool_state = "Stopped" })
      }
    }
    profiles = {
      for name, profile in var.profiles : name => {
        cluster           = module.cluster.name
        service           = module.profile[name].service_name
        pool              = profile.pool
        target_group_arn  = module.profile[name].target_group_arn
        load_balancer_arn = module.alb.arn
        endpoint_url      = module.alb.endpoint_url
        routing_header = {
          name  = local.routing_header_name
          value = name
        }
        model                 = module.profile[name].served_model_name
        serving               = module.profile[name].serving
        schedule              = profile.schedule
        idle                  = profile.idle
        autostop              = profile.autostop
        default_lease_minutes = profile.default_lease_minutes
        max_lease_minutes     = profile.max_lease_minutes
        load                  = local.load[name]
        min_replicas          = profile.min_replicas
        max_replicas          = profile.max_replicas
        wake_on_request       = profile.wake_on_request
        # Where the controller points the rule (ModifyRule); published once the waker is deployed.
        wake = var.waker_function_arn == null ? null : {
          listener_rule_arn      = module.profile[name].listener_rule_arn
          waker_target_group_arn = aws_lb_target_group.waker[0].arn
          monthly_budget_usd     = profile.wake_monthly_budget_usd
        }
        start = merge(local.start_deadlines[name], { max_task_failures = profile.start.max_task_failures })
        # The controller refuses deadlines past these: a model whose derived load takes longer than
        # the controller's default 2 h raises the start limit to its own deadlines (at most 24 h).
        limits = {
          max_start_deadline_s = min(86400, max(7200, values(local.start_deadlines[name])...))
          max_stop_deadline_s  = 3600
          max_poll_interval_s  = 300
        }
      }
    }
  }
}

locals {
  registry_path = "/${var.name}/registry"
  # What must be there: a parameter the index lists but SSM lacks is missing, not removed.
  registry_index = {
    schema_version = local.registry.schema_version
    region         = local.registry.region
    pools          = sort(keys(local.registry.pools))
    profiles       = sort(keys(local.registry.profiles))
  }
}

resource "aws_ssm_parameter" "registry_pool" {
  #checkov:skip=CKV2_AWS_34:The registry holds names and ARNs, no secret; the controller reads it as a plain String without decryption.
  for_each    = local.registry.pools
  name        = "${local.registry_path}/pools/${each.key}"
  description = "servingctl registry: compute pool ${each.key} (schema_version 1)"
  type        = "String"
  # About 0.5 KB: Standard; the tier moves to Advanced only for a pool past 4 KB.
  tier  = "Intelligent-Tiering"
  value = jsonencode(each.value)
}

resource "aws_ssm_parameter" "registry_profile" {
  #checkov:skip=CKV2_AWS_34:The registry holds names and ARNs, no secret; the controller reads it as a plain String without decryption.
  for_each    = local.registry.profiles
  name        = "${local.registry_path}/profiles/${each.key}"
  description = "servingctl registry: serving profile ${each.key} (schema_version 1)"
  type        = "String"
  # 0.7-0.9 KB with the vLLM command line: Standard; Advanced only for a profile past 4 KB.
  tier  = "Intelligent-Tiering"
  value = jsonencode(each.value)
}

resource "aws_ssm_parameter" "registry_index" {
  #checkov:skip=CKV2_AWS_34:The registry holds names and ARNs, no secret; the controller reads it as a plain String without decryption.
  name        = "${local.registry_path}/index"
  description = "servingctl registry of the ${var.name} data plane: region and the names of its pools and profiles (schema_version 1)"
  type        = "String"
  # 50 profile and 50 pool names of up to 28 and 31 characters fit 4 KB; Advanced past it.
  tier  = "Intelligent-Tiering"
  value = jsonencode(local.registry_index)
  # Written after the parameters it lists (and, on a removal, before the removed one is deleted):
  # the controller reads a profile the index no longer lists as removed.
  depends_on = [aws_ssm_parameter.registry_pool, aws_ssm_parameter.registry_profile]
}
