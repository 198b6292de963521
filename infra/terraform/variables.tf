variable "name" {
  description = "Name prefix of every resource (cluster, ALB, ASGs, services, registry parameter)."
  type        = string
  default     = "self-hosted-llm-poc"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,22}$", var.name)) && !can(regex("^(aws|ecs|fargate)", var.name))
    error_message = "name must match ^[a-z][a-z0-9-]{1,22}$ and must not start with aws, ecs or fargate (capacity provider names)."
  }
}

variable "region" {
  description = "AWS region of the data plane (and of the SAM stack that reads the registry)."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "availability_zones" {
  description = "The two AZs of the private subnets; choose zones that offer every pool's GPU instance type (aws ec2 describe-instance-type-offerings --location-type availability-zone)."
  type        = list(string)
  default     = ["us-east-1a", "us-east-1b"]

  validation {
    condition     = length(var.availability_zones) == 2 && length(distinct(var.availability_zones)) == 2 && alltrue([for z in var.availability_zones : startswith(z, var.region)])
    error_message = "availability_zones must name exactly two different zones of var.region, e.g. [\"us-east-1a\", \"us-east-1b\"]."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the VPC; private subnets are its first two /20s, the NAT subnet a /28 near the end."
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrnetmask(var.vpc_cidr)) && tonumber(split("/", var.vpc_cidr)[1]) <= 18
    error_message = "vpc_cidr must be an IPv4 CIDR of size /18 or larger, e.g. 10.40.0.0/16."
  }
}

variable "egress" {
  description = "How the private subnets reach the outside: nat (a NAT gateway, about 33 USD a month plus 0.045 USD/GB: images from Docker Hub, weights from the hub) or endpoints (no NAT: interface endpoints for ECR, CloudWatch Logs, SSM, ECS and STS, gateway endpoints for S3 and DynamoDB; images must come from ECR and weights from S3). `servingctl costs idle` prices either."
  type        = string
  default     = "nat"

  validation {
    condition     = contains(["nat", "endpoints"], var.egress)
    error_message = "egress must be nat or endpoints."
  }
  validation {
    condition     = var.egress == "nat" || alltrue([for p in values(var.profiles) : p.weights_source == "s3" && can(regex("^[0-9]{12}\\.dkr\\.ecr\\.[a-z0-9-]+\\.amazonaws\\.com/", p.image))])
    error_message = "egress = \"endpoints\" has no route to the internet: every one of profiles needs weights_source = \"s3\" and an image in ECR (ACCOUNT.dkr.ecr.REGION.amazonaws.com/..., e.g. an ECR pull-through cache of Docker Hub)."
  }
}

variable "client_cidrs" {
  description = "Extra CIDRs inside the VPC (e.g. a bastion or VPN subnet) allowed to call the ALB on port 80."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.client_cidrs : can(cidrnetmask(c)) && c != "0.0.0.0/0"])
    error_message = "client_cidrs must be IPv4 CIDRs inside the VPC; 0.0.0.0/0 is refused (nothing is reachable from outside)."
  }
}

variable "hub_token_secret_arn" {
  description = "Secrets Manager ARN of a Hugging Face token (plain string secret) given to the model server as HF_TOKEN; null for public models."
  type        = string
  default     = null

  validation {
    condition     = var.hub_token_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", var.hub_token_secret_arn))
    error_message = "hub_token_secret_arn must be a Secrets Manager secret ARN or null."
  }
}

variable "model_weights_bucket" {
  description = "S3 bucket holding Hugging Face cache trees (see README, model cache). Required when a profile has weights_source = \"s3\"."
  type        = string
  default     = null

  validation {
    condition     = var.model_weights_bucket == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.model_weights_bucket))
    error_message = "model_weights_bucket must be an S3 bucket name or null."
  }
}

variable "model_weights_prefix" {
  description = "Key prefix in model_weights_bucket under which each model's Hugging Face cache tree (models--<org>--<name>/) lives."
  type        = string
  default     = "hf-hub"

  validation {
    condition     = can(regex("^[A-Za-z0-9._/-]+$", var.model_weights_prefix))
    error_message = "model_weights_prefix must be an S3 key prefix (letters, digits, . _ - /)."
  }
}

variable "log_retention_days" {
  description = "Retention of the model server logs in CloudWatch Logs."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a CloudWatch Logs retention value (1, 3, 5, 7, 14, 30, 60, 90, ... 365, ... 3653)."
  }
}

variable "pools" {
  description = "Compute pools, one per GPU shape (launch template + ASG + capacity provider), keyed by pool name."
  type = map(object({
    instance_type                  = string
    gpu_count                      = number
    root_volume_gib                = optional(number, 200)
    price_key                      = optional(string)
    instance_warmup_s              = optional(number, 300)
    managed_termination_protection = optional(bool, false)
    model_cache_on_instance_store  = optional(bool, false)
    # gp3 of the model cache: sized for the 168 GB reference checkpoint (about 160 s per pass).
    cache_throughput_mibps = optional(number, 1000)
    cache_iops             = optional(number, 16000)
    # Capacity fallback: up to 3 instance types of the same GPU count and GPU memory (gpu_shapes),
    # tried in order when the primary type has no capacity.
    alternate_instance_types = optional(list(string), [])
    # A warm pool of Stopped instances (null: none). min_size 0 keeps one stopped instance while the
    # pool rests and none beside a running one; 1 also keeps a spare. reuse_on_scale_in is off by
    # default: the ECS developer guide says it cannot be set on an ECS group (the capacity
    # provider's scale-in breaks; awsdocs/amazon-ecs-developer-guide#216). servingctl's stop scales
    # the group in itself, so a pool may opt in: the stopped instance then keeps the image layers,
    # weights and compile cache. Without it a stop terminates, and the group refills the pool with
    # a new Stopped instance (a start then skips the EC2 launch and boot only).
    # prepare: a launch lifecycle hook holds each new warm-pool instance in Warmed:Pending:Wait while
    # its user data pulls the pool's images, syncs their weights and runs vLLM once to fill the
    # compile cache, then completes the hook; a start from it skips pull, download and compile.
    # max_group_prepared_capacity bounds group + pool (each stopped instance pays for its volume).
    warm_pool = optional(object({
      min_size                    = optional(number, 0)
      reuse_on_scale_in           = optional(bool, false)
      prepare                     = optional(bool, false)
      prepare_timeout_s           = optional(number, 3600)
      max_group_prepared_capacity = optional(number)
    }))
  }))

  validation {
    condition     = length(var.pools) > 0 && alltrue([for k, p in var.pools : can(regex("^[a-z0-9][a-z0-9-]{0,30}$", k))])
    error_message = "pools must not be empty and every pool name must match ^[a-z0-9][a-z0-9-]{0,30}$."
  }
  validation {
    condition     = length(var.pools) <= 50
    error_message = "pools: at most 50 (the registry's bound, MAX_POOLS in the controller's registry models)."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", p.instance_type)) && p.gpu_count >= 1 && p.gpu_count <= 16 && floor(p.gpu_count) == p.gpu_count])
    error_message = "pools.*.instance_type must look like g7e.12xlarge and pools.*.gpu_count must be an integer from 1 to 16."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : p.root_volume_gib >= 100 && p.root_volume_gib <= 16384 && p.instance_warmup_s >= 0 && p.instance_warmup_s <= 10000])
    error_message = "pools.*.root_volume_gib must be 100..16384 (the image and weights live there) and pools.*.instance_warmup_s 0..10000."
  }
  # gp3 limits: 125..1000 MiB/s, 3000..16000 IOPS, at most 0.25 MiB/s per IOPS (the 500 IOPS per GiB
  # rule cannot bind: root_volume_gib >= 100 allows 50000).
  validation {
    condition     = alltrue([for p in values(var.pools) : p.cache_throughput_mibps >= 125 && p.cache_throughput_mibps <= 1000 && floor(p.cache_throughput_mibps) == p.cache_throughput_mibps])
    error_message = "pools.*.cache_throughput_mibps must be an integer from 125 to 1000 (gp3 throughput in MiB/s)."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : p.cache_iops >= 3000 && p.cache_iops <= 16000 && floor(p.cache_iops) == p.cache_iops])
    error_message = "pools.*.cache_iops must be an integer from 3000 to 16000 (gp3 IOPS)."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : p.cache_throughput_mibps * 4 <= p.cache_iops])
    error_message = "pools.*.cache_throughput_mibps may be at most pools.*.cache_iops / 4 (gp3: 0.25 MiB/s per provisioned IOPS), e.g. 1000 MiB/s needs 4000 IOPS."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : !contains(keys(var.gpu_shapes), p.instance_type) || try(var.gpu_shapes[p.instance_type].gpus == p.gpu_count, false)])
    error_message = "pools.*.gpu_count must equal gpu_shapes[pools.*.instance_type].gpus when gpu_shapes lists the type."
  }
  validation {
    condition = alltrue([for p in values(var.pools) : length(p.alternate_instance_types) == 0 || (
      length(p.alternate_instance_types) <= 3 && length(distinct(p.alternate_instance_types)) == length(p.alternate_instance_types)
      && !contains(p.alternate_instance_types, p.instance_type) && contains(keys(var.gpu_shapes), p.instance_type)
      && alltrue([for t in p.alternate_instance_types : try(var.gpu_shapes[t] == var.gpu_shapes[p.instance_type], false)])
    )])
    error_message = "pools.*.alternate_instance_types must list at most 3 distinct instance types other than pools.*.instance_type, each in gpu_shapes with the same GPU count and GPU memory as pools.*.instance_type (which must be in gpu_shapes too)."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : p.warm_pool == null || try(coalesce(p.warm_pool.max_group_prepared_capacity, 1) >= 1 && coalesce(p.warm_pool.max_group_prepared_capacity, 1) <= 16 && floor(coalesce(p.warm_pool.max_group_prepared_capacity, 1)) == coalesce(p.warm_pool.max_group_prepared_capacity, 1), false)])
    error_message = "pools.*.warm_pool.max_group_prepared_capacity must be null (the group's MaxSize) or an integer from 1 to 16 (instances in the group and the warm pool together)."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : p.warm_pool == null || try(p.warm_pool.prepare_timeout_s >= 30 && p.warm_pool.prepare_timeout_s <= 7200, false)])
    error_message = "pools.*.warm_pool.prepare_timeout_s must be 30..7200 seconds (the prepare hook's heartbeat timeout)."
  }
  validation {
    condition     = alltrue([for p in values(var.pools) : p.warm_pool == null || try(contains([0, 1], p.warm_pool.min_size), false)])
    error_message = "pools.*.warm_pool.min_size must be 0 (one stopped instance while the pool rests) or 1 (also a spare beside the running one): the group runs at most one instance."
  }
}

variable "gpu_shapes" {
  description = "GPU count and total GPU memory (GiB) per instance type, from the EC2 accelerated computing instance pages: the capacity fallback only moves between types of one shape. Add a type here to use it."
  type = map(object({
    gpus           = number
    gpu_memory_gib = number
  }))
  default = {
    # RTX PRO 6000 Blackwell Server Edition, 96 GiB each.
    "g7e.2xlarge"  = { gpus = 1, gpu_memory_gib = 96 }
    "g7e.4xlarge"  = { gpus = 1, gpu_memory_gib = 96 }
    "g7e.8xlarge"  = { gpus = 1, gpu_memory_gib = 96 }
    "g7e.12xlarge" = { gpus = 2, gpu_memory_gib = 192 }
    "g7e.24xlarge" = { gpus = 4, gpu_memory_gib = 384 }
    "g7e.48xlarge" = { gpus = 8, gpu_memory_gib = 768 }
    # L40S, 48 GiB each.
    "g6e.xlarge"   = { gpus = 1, gpu_memory_gib = 48 }
    "g6e.2xlarge"  = { gpus = 1, gpu_memory_gib = 48 }
    "g6e.4xlarge"  = { gpus = 1, gpu_memory_gib = 48 }
    "g6e.8xlarge"  = { gpus = 1, gpu_memory_gib = 48 }
    "g6e.16xlarge" = { gpus = 1, gpu_memory_gib = 48 }
    "g6e.12xlarge" = { gpus = 4, gpu_memory_gib = 192 }
    "g6e.24xlarge" = { gpus = 4, gpu_memory_gib = 192 }
    "g6e.48xlarge" = { gpus = 8, gpu_memory_gib = 384 }
    # H100 80 GiB, H200 141 GiB.
    "p5.4xlarge"    = { gpus = 1, gpu_memory_gib = 80 }
    "p5.48xlarge"   = { gpus = 8, gpu_memory_gib = 640 }
    "p5e.48xlarge"  = { gpus = 8, gpu_memory_gib = 1128 }
    "p5en.48xlarge" = { gpus = 8, gpu_memory_gib = 1128 }
  }

  validation {
    condition     = alltrue([for t, s in var.gpu_shapes : can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", t)) && s.gpus >= 1 && s.gpus <= 16 && s.gpu_memory_gib > 0])
    error_message = "gpu_shapes keys must be instance types like g7e.12xlarge, with gpus 1..16 and gpu_memory_gib above 0."
  }
}

variable "profiles" {
  description = "Serving profiles, one per model (task definition + ECS service + target group + listener rule), keyed by profile name (also the X-LLM-Profile header value)."
  type = map(object({
    pool              = string
    service_name      = optional(string)
    served_model_name = optional(string)
    image             = string
    vllm_version      = optional(string)
    model_id          = string
    revision          = optional(string)
    task_cpu          = number
    task_memory_mib   = number
    listener_priority = number
    # Load time: checkpoint size (GB) and vLLM's load/compile/CUDA-graph allowance, or model_load_s to override the derived grace period.
    weights_gb       = optional(number)
    load_allowance_s = optional(number, 600)
    model_load_s     = optional(number)
    weights_source   = optional(string, "s3")
    # sync: prefetch to the volume, then load; runai_streamer: vLLM streams from S3 (no prefetch).
    load_format = optional(string, "sync")
    vllm = object({
      tensor_parallel_size    = optional(number, 1)
      max_num_seqs            = optional(number, 4)
      max_num_batched_tokens  = optional(number)
      max_model_len           = optional(number)
      gpu_memory_utilization  = optional(number, 0.9)
      kv_cache_dtype          = optional(string)
      speculative_method      = optional(string, "mtp")
      speculative_tokens      = optional(number, 0)
      cudagraph_mode          = optional(string, "FULL_DECODE_ONLY")
      tokenizer_mode          = optional(string)
      reasoning_parser        = optional(string)
      tool_call_parser        = optional(string)
      enable_auto_tool_choice = optional(bool, false)
      trust_remote_code       = optional(bool, false)
      extra_args              = optional(list(string), [])
    })
    schedule = optional(object({
      timezone = optional(string, "UTC")
      override = optional(string)
      # true: a period's end stops the profile even while requests run (after the drain).
      enforced = optional(bool, false)
      periods = list(object({
        begin_time = optional(string)
        end_time   = optional(string)
        weekdays   = optional(list(string), ["mon", "tue", "wed", "thu", "fri", "sat", "sun"])
        month_days = optional(list(number))
      }))
    }))
    idle = optional(object({
      enabled        = optional(bool, true)
      window_minutes = optional(number, 30)
    }), {})
    # How the sweep stops the profile (registry autostop block): warning, drain after a hard limit, hard limits.
    autostop = optional(object({
      warning_minutes     = optional(number, 15)
      drain_minutes       = optional(number, 10)
      max_runtime_minutes = optional(number)
      max_session_usd     = optional(number)
    }), {})
    default_lease_minutes = optional(number, 120)
    max_lease_minutes     = optional(number, 720)
    # Scale to zero: while not READY, requests reach the waker (503 with Retry-After) and the first starts it.
    wake_on_request = optional(bool, false)
    # No wake once the profile's ledger cost this month reaches it (null: no budget).
    wake_monthly_budget_usd = optional(number)
    start = optional(object({
      capacity_timeout_s = optional(number, 900)
      task_timeout_s     = optional(number)
      health_timeout_s   = optional(number)
      max_task_failures  = optional(number, 3)
    }), {})
    # Replicas: a start brings min_replicas up; ECS service auto scaling (target tracking) moves
    # between min and max on scaling_metric while READY. One task per instance (its GPUs).
    min_replicas = optional(number, 1)
    max_replicas = optional(number, 1)
    # requests-per-replica: running + waiting requests of vLLM's /metrics per replica, which the
    # controller's sweep publishes (namespace servingctl, metric RequestsPerReplica, dimension
    # Profile); alb-request-count: ALBRequestCountPerTarget (requests per target per minute).
    scaling_metric = optional(string, "requests-per-replica")
    # The metric's value per replica that target tracking holds; null: vllm.max_num_seqs for
    # requests-per-replica (a full batch), required for alb-request-count.
    scaling_target = optional(number)
    # Seconds target tracking waits after a scale-in before the next (a replica's drain).
    scale_in_cooldown_s  = optional(number, 300)
    scale_out_cooldown_s = optional(number, 60)
  }))

  validation {
    condition     = length(var.profiles) > 0 && alltrue([for k, p in var.profiles : can(regex("^[a-z0-9][a-z0-9-]{0,27}$", k))])
    error_message = "profiles must not be empty and every profile name must match ^[a-z0-9][a-z0-9-]{0,27}$ (it names the target group llm-<profile>, 32 characters at most)."
  }
  validation {
    condition     = length(var.profiles) <= 50
    error_message = "profiles: at most 50 (the registry's bound, MAX_PROFILES in the controller's registry models: each sweep decides every profile in one run)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.task_cpu >= 256 && p.task_cpu <= 196608 && floor(p.task_cpu) == p.task_cpu && p.task_memory_mib >= 512 && floor(p.task_memory_mib) == p.task_memory_mib])
    error_message = "profiles.*.task_cpu must be an integer from 256 to 196608 (ECS CPU units, 1024 per vCPU; 192 vCPUs is ECS's task maximum on EC2) and profiles.*.task_memory_mib an integer of at least 512 (MiB)."
  }
  validation {
    condition     = alltrue([for k, p in var.profiles : contains(keys(var.pools), p.pool)])
    error_message = "profiles.*.pool must name a key of pools."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : !p.wake_on_request || var.waker_function_arn != null])
    error_message = "profiles.*.wake_on_request needs waker_function_arn (the SAM stack's WakerFunctionArn output): deploy the stack, then apply again with it."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.wake_monthly_budget_usd == null || try(p.wake_monthly_budget_usd > 0 && p.wake_monthly_budget_usd <= 1000000, false)])
    error_message = "profiles.*.wake_monthly_budget_usd must be null or above 0 up to 1000000 (USD)."
  }
  # A profile on an unknown pool gets the rule above's message only.
  validation {
    condition     = alltrue([for p in values(var.profiles) : !contains(keys(var.pools), p.pool) || (p.vllm.tensor_parallel_size >= 1 && p.vllm.tensor_parallel_size <= try(var.pools[p.pool].gpu_count, 0))])
    error_message = "profiles.*.vllm.tensor_parallel_size must be 1..gpu_count of the profile's pool (the task reserves that many GPUs)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.vllm.speculative_tokens >= 0 && p.vllm.speculative_tokens <= 8 && floor(p.vllm.speculative_tokens) == p.vllm.speculative_tokens])
    error_message = "profiles.*.vllm.speculative_tokens must be an integer from 0 to 8."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.vllm.max_num_seqs >= 1 && p.vllm.max_num_seqs <= 1024 && p.vllm.max_num_seqs * (1 + p.vllm.speculative_tokens) <= 16384])
    error_message = "profiles.*.vllm.max_num_seqs must be 1..1024 and max_num_seqs x (1 + speculative_tokens) at most 16384 (CUDA-graph capture sizes)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : (p.vllm.max_num_batched_tokens == null || try(p.vllm.max_num_batched_tokens >= 1, false)) && (p.vllm.max_model_len == null || try(p.vllm.max_model_len >= 1, false))])
    error_message = "profiles.*.vllm.max_num_batched_tokens and profiles.*.vllm.max_model_len must be null (vLLM's default) or at least 1."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.vllm.kv_cache_dtype == null || contains(["auto", "fp8", "fp8_e4m3", "fp8_e5m2"], coalesce(p.vllm.kv_cache_dtype, "auto"))])
    error_message = "profiles.*.vllm.kv_cache_dtype must be null, auto, fp8, fp8_e4m3 or fp8_e5m2."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.vllm.gpu_memory_utilization > 0 && p.vllm.gpu_memory_utilization <= 0.98])
    error_message = "profiles.*.vllm.gpu_memory_utilization must be in (0, 0.98]."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : contains(["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"], p.vllm.cudagraph_mode)])
    error_message = "profiles.*.vllm.cudagraph_mode must be NONE, PIECEWISE, FULL, FULL_DECODE_ONLY or FULL_AND_PIECEWISE."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : contains(["s3", "hub"], p.weights_source)])
    error_message = "profiles.*.weights_source must be s3 (prefetch through the S3 gateway endpoint) or hub (download through NAT)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.weights_source != "s3" || var.model_weights_bucket != null])
    error_message = "a profile has weights_source = \"s3\" but model_weights_bucket is null: set model_weights_bucket or weights_source = \"hub\"."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.weights_gb != null || p.model_load_s != null])
    error_message = "profiles.*.weights_gb (checkpoint size in GB, to derive the load time) or profiles.*.model_load_s must be set."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.weights_gb == null || try(p.weights_gb > 0 && p.weights_gb <= 8192, false)])
    error_message = "profiles.*.weights_gb must be a checkpoint size in GB, above 0 and at most 8192."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.load_allowance_s >= 0 && p.load_allowance_s <= 7200])
    error_message = "profiles.*.load_allowance_s (vLLM load, compile and CUDA-graph capture after the weights are read) must be 0..7200 seconds."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.model_load_s == null || try(p.model_load_s >= 60 && p.model_load_s <= 7200, false)])
    error_message = "profiles.*.model_load_s (ECS health-check grace period) must be 60..7200 seconds."
  }
  validation {
    condition     = length(distinct([for p in values(var.profiles) : p.listener_priority])) == length(var.profiles) && alltrue([for p in values(var.profiles) : p.listener_priority >= 1 && p.listener_priority <= 50000])
    error_message = "profiles.*.listener_priority must be unique and 1..50000."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.default_lease_minutes >= 5 && p.default_lease_minutes <= p.max_lease_minutes && p.default_lease_minutes <= 10080 && p.max_lease_minutes <= 44640])
    error_message = "profiles.*.default_lease_minutes must be 5..max_lease_minutes and at most 10080 (7 days), and max_lease_minutes at most 44640 (31 days)."
  }
  validation {
    condition = alltrue([for p in values(var.profiles) :
      p.autostop.warning_minutes >= 1 && p.autostop.warning_minutes <= 1440 && p.autostop.drain_minutes >= 0 && p.autostop.drain_minutes <= 120
      && (p.autostop.max_runtime_minutes == null || try(p.autostop.max_runtime_minutes >= p.default_lease_minutes && p.autostop.max_runtime_minutes <= 44640, false))
      && (p.autostop.max_session_usd == null || try(p.autostop.max_session_usd > 0 && p.autostop.max_session_usd <= 1000000, false))
    ])
    error_message = "profiles.*.autostop: warning_minutes must be 1..1440, drain_minutes 0..120, max_runtime_minutes null or default_lease_minutes..44640, max_session_usd null or above 0 up to 1000000."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.idle.window_minutes >= 5 && p.idle.window_minutes <= 1440])
    error_message = "profiles.*.idle.window_minutes must be 5..1440 (minutes without a request before the sweep stops the profile)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : alltrue([for t in [p.start.capacity_timeout_s, p.start.task_timeout_s, p.start.health_timeout_s] : t == null || try(t >= 1, false)]) && p.start.max_task_failures >= 1])
    error_message = "profiles.*.start: capacity_timeout_s, task_timeout_s and health_timeout_s must be positive seconds (task and health: null derives them from the load time) and max_task_failures at least 1."
  }
  # The schedule's time zone is checked by the controller (IANA names); Terraform has no zone list.
  validation {
    condition = alltrue([for p in values(var.profiles) : p.schedule == null || try(
      length(p.schedule.periods) >= 1 && contains(["running", "stopped"], coalesce(p.schedule.override, "running"))
      && alltrue([for period in p.schedule.periods :
        alltrue([for t in compact([period.begin_time, period.end_time]) : can(regex("^([01][0-9]|2[0-3]):[0-5][0-9]$", t))])
        && alltrue([for d in period.weekdays : contains(["mon", "tue", "wed", "thu", "fri", "sat", "sun"], d)])
        # month_days may be null (every day of the month).
        && alltrue([for d in coalesce(period.month_days, []) : d >= 1 && d <= 31 && floor(d) == d])
      ]), false)
    ])
    error_message = "profiles.*.schedule: periods must hold at least one period, each with begin_time and end_time as HH:MM (00:00..23:59) or null, weekdays from mon, tue, wed, thu, fri, sat, sun, month_days from 1 to 31; override must be null, running or stopped."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.min_replicas >= 1 && floor(p.min_replicas) == p.min_replicas && p.max_replicas <= 16 && floor(p.max_replicas) == p.max_replicas && p.min_replicas <= p.max_replicas])
    error_message = "profiles.*.min_replicas and profiles.*.max_replicas must be integers with 1 <= min_replicas <= max_replicas <= 16 (MAX_REPLICAS in the controller's registry models)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.max_replicas <= 1 || try(var.pools[p.pool].managed_termination_protection, true)])
    error_message = "profiles.*.max_replicas above 1 needs managed_termination_protection = true on the profile's pool: ECS then protects the instances that run tasks, so the capacity provider's scale-in takes only an empty instance, never one serving a replica."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : contains(["requests-per-replica", "alb-request-count"], p.scaling_metric)])
    error_message = "profiles.*.scaling_metric must be requests-per-replica (vLLM's running + waiting requests per replica, published by the sweep) or alb-request-count (ALBRequestCountPerTarget)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.scaling_target == null ? p.scaling_metric == "requests-per-replica" : try(p.scaling_target > 0, false)])
    error_message = "profiles.*.scaling_target must be above 0, and is required with scaling_metric = \"alb-request-count\" (requests per target per minute)."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.scale_in_cooldown_s >= 0 && p.scale_in_cooldown_s <= 3600 && p.scale_out_cooldown_s >= 0 && p.scale_out_cooldown_s <= 3600])
    error_message = "profiles.*.scale_in_cooldown_s and profiles.*.scale_out_cooldown_s must be 0..3600 seconds."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : contains(["sync", "runai_streamer"], p.load_format) && (p.load_format == "sync" || (p.weights_source == "s3" && p.revision != null))])
    error_message = "profiles.*.load_format must be sync or runai_streamer; runai_streamer streams the pinned revision's snapshot from the weights bucket, so it needs weights_source = \"s3\" and a revision."
  }
  validation {
    condition     = alltrue([for p in values(var.profiles) : p.revision == null || can(regex("^[0-9a-f]{40}$", coalesce(p.revision, "x")))])
    error_message = "profiles.*.revision must be a full 40-character commit hash (pin the model) or null."
  }
}

variable "alb_access_logs" {
  description = "Write the ALB's access logs to an S3 bucket of their own (off by default): the traffic trace `servingctl costs simulate --format alb` replays."
  type        = bool
  default     = false
}

variable "waker_function_arn" {
  description = "The SAM stack's WakerFunctionArn output: its Lambda target group and ELB's permission to invoke it are made here. Required once a profile has wake_on_request (deploy the stack, then apply again with it)."
  type        = string
  default     = null

  validation {
    condition     = var.waker_function_arn == null || can(regex("^arn:aws[a-z-]*:lambda:[a-z0-9-]+:[0-9]{12}:function:[A-Za-z0-9_-]+$", var.waker_function_arn))
    error_message = "waker_function_arn must be a Lambda function ARN (the SAM stack's WakerFunctionArn output), or null."
  }
}
