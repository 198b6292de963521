# Root module: wires the data plane from the typed `pools` and `profiles` inputs and publishes the
# registry document the controller reads. Nothing else hard-codes a pool or profile name.

# Load time of each profile, from the checkpoint size and its pool's cache throughput (README, model
# cache throughput). One pass moves the checkpoint through the gp3 volume once: the prefetch (or hub
# download) writes it, vLLM reads it back; the allowance covers vLLM's load, compile and CUDA-graph
# capture after that. An explicit model_load_s wins over the derived value.
locals {
  image_pull_allowance_s = 900
  weights_pass_s = {
    for name, p in var.profiles : name => p.weights_gb == null ? null : ceil(p.weights_gb * 1000000000 / 1048576 / var.pools[p.pool].cache_throughput_mibps)
  }
  load = {
    for name, p in var.profiles : name => {
      weights_gb             = p.weights_gb
      cache_throughput_mibps = var.pools[p.pool].cache_throughput_mibps
      cache_iops             = var.pools[p.pool].cache_iops
      weights_pass_s         = local.weights_pass_s[name]
      allowance_s            = p.load_allowance_s
      # The ECS service ignores failing ELB health checks this long after the task starts.
      health_check_grace_s = coalesce(p.model_load_s, 2 * coalesce(local.weights_pass_s[name], 0) + p.load_allowance_s)
    }
  }
}

module "network" {
  source = "./modules/network"

  name               = var.name
  region             = var.region
  cidr               = var.vpc_cidr
  availability_zones = var.availability_zones
  egress             = var.egress
}

module "alb" {
  source = "./modules/alb"

  name         = var.name
  vpc_id       = module.network.vpc_id
  vpc_cidr     = module.network.vpc_cidr
  subnet_ids   = module.network.private_subnet_ids
  client_cidrs = var.client_cidrs
  region       = var.region
  access_logs  = var.alb_access_logs
}

module "cluster" {
  source = "./modules/cluster"

  name                  = var.name
  vpc_id                = module.network.vpc_id
  alb_security_group_id = module.alb.security_group_id
  # The sweep reads the model servers' gauges directly (outside the ALB's RequestCount).
  controller_security_group_id = module.alb.lambda_security_group_id
}

module "pool" {
  source   = "./modules/compute-pool"
  for_each = var.pools

  name                           = "${var.name}-${each.key}"
  pool                           = each.key
  cluster_name                   = module.cluster.name
  instance_profile_arn           = module.cluster.instance_profile_arn
  vpc_id                         = module.network.vpc_id
  subnet_ids                     = module.network.private_subnet_ids
  instance_type                  = each.value.instance_type
  root_volume_gib                = each.value.root_volume_gib
  cache_throughput_mibps         = each.value.cache_throughput_mibps
  cache_iops                     = each.value.cache_iops
  instance_warmup_s              = each.value.instance_warmup_s
  managed_termination_protection = each.value.managed_termination_protection
  model_cache_on_instance_store  = each.value.model_cache_on_instance_store
  model_cache_path               = local.model_cache_path
  alternate_instance_types       = each.value.alternate_instance_types
  warm_pool                      = each.value.warm_pool
  # The warm pool's prepare step readies every profile of the pool (image and command read from
  # its task definition at boot: the profiles depend on the pools, not the other way round).
  prepare_profiles = [for name, p in var.profiles : {
    name        = name
    family      = coalesce(p.service_name, "${var.name}-${name}")
    weights_key = p.weights_source == "s3" && p.load_format == "sync" ? "${trim(var.model_weights_prefix, "/")}/models--${replace(p.model_id, "/", "--")}" : null
    cache_dir   = "${local.model_cache_path}/hub/models--${replace(p.model_id, "/", "--")}"
    marker      = "${local.model_cache_path}/hub/models--${replace(p.model_id, "/", "--")}/.servingctl-synced-${coalesce(p.revision, "unpinned")}"
    gpus        = p.vllm.tensor_parallel_size
  } if p.pool == each.key]
  instance_role_name = module.cluster.instance_role_name
  weights_bucket     = var.model_weights_bucket
  # One instance per replica: the most replicas any profile of the pool may run.
  max_size = max(1, [for p in values(var.profiles) : p.max_replicas if p.pool == each.key]...)
}

# A cluster's capacity providers are one resource: it needs every pool, so it lives here.
resource "aws_ecs_cluster_capacity_providers" "this" {
  cluster_name       = module.cluster.name
  capacity_providers = [for p in module.pool : p.capacity_provider_name]
}

module "profile" {
  source   = "./modules/serving-profile"
  for_each = var.profiles

  name                    = each.key
  service_name            = coalesce(each.value.service_name, "${var.name}-${each.key}")
  served_model_name       = coalesce(each.value.served_model_name, each.key)
  region                  = var.region
  cluster_arn             = module.cluster.arn
  pool                    = each.value.pool
  capacity_provider       = module.pool[each.value.pool].capacity_provider_name
  vpc_id                  = module.network.vpc_id
  subnet_ids              = module.network.private_subnet_ids
  task_security_group_ids = [module.cluster.task_security_group_id]
  listener_arn            = module.alb.listener_arn
  listener_priority       = each.value.listener_priority
  routing_header_name     = local.routing_header_name
  image                   = each.value.image
  vllm_version            = each.value.vllm_version
  model_id                = each.value.model_id
  revision                = each.value.revision
  vllm                    = each.value.vllm
  task_cpu                = each.value.task_cpu
  task_memory_mib         = each.value.task_memory_mib
  model_load_s            = local.load[each.key].health_check_grace_s
  model_cache_path        = local.model_cache_path
  weights_source          = each.value.weights_source
  load_format             = each.value.load_format
  weights_bucket          = var.model_weights_bucket
  weights_prefix          = var.model_weights_prefix
  hub_token_secret_arn    = var.hub_token_secret_arn
  log_retention_days      = var.log_retention_days
  min_replicas            = each.value.min_replicas
  max_replicas            = each.value.max_replicas
  scaling_metric          = each.value.scaling_metric
  scaling_target          = coalesce(each.value.scaling_target, each.value.vllm.max_num_seqs)
  scale_in_cooldown_s     = each.value.scale_in_cooldown_s
  scale_out_cooldown_s    = each.value.scale_out_cooldown_s
  alb_arn_suffix          = module.alb.arn_suffix
  wake_on_request         = each.value.wake_on_request
  waker_target_group_arn  = one(aws_lb_target_group.waker[*].arn)

  depends_on = [aws_ecs_cluster_capacity_providers.this]
}

# The waker (template.yaml's WakerFunction): the Lambda target group a sleeping wake-on-request
# profile's rule forwards to. ELB may invoke the function for this group only, before it targets it.
resource "aws_lb_target_group" "waker" {
  count       = var.waker_function_arn == null ? 0 : 1
  name        = "${var.name}-waker"
  target_type = "lambda"
}

resource "aws_lambda_permission" "waker" {
  count         = var.waker_function_arn == null ? 0 : 1
  statement_id  = "AllowInvokeFromWakerTargetGroup"
  action        = "lambda:InvokeFunction"
  function_name = var.waker_function_arn
  principal     = "elasticloadbalancing.amazonaws.com"
  source_arn    = aws_lb_target_group.waker[0].arn
}

resource "aws_lb_target_group_attachment" "waker" {
  count            = var.waker_function_arn == null ? 0 : 1
  target_group_arn = aws_lb_target_group.waker[0].arn
  target_id        = var.waker_function_arn
  # RegisterTargets of a Lambda function fails until ELB may invoke it.
  depends_on = [aws_lambda_permission.waker]
}
