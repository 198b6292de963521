variable "name" {
  description = "Profile name: registry key, X-LLM-Profile header value and target group suffix."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,27}$", var.name))
    error_message = "name must match ^[a-z0-9][a-z0-9-]{0,27}$."
  }
}

variable "service_name" {
  description = "ECS service name (also the task family and log group suffix)."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9_-]{0,54}$", var.service_name))
    error_message = "service_name must be 1..55 letters, digits, hyphens or underscores (IAM role names append -exec/-task)."
  }
}

variable "served_model_name" {
  description = "Model name clients send in requests (--served-model-name)."
  type        = string
}

variable "region" {
  description = "Region for the awslogs driver."
  type        = string
}

variable "cluster_arn" {
  description = "ECS cluster ARN."
  type        = string
}

variable "pool" {
  description = "Name of the profile's compute pool (tagged on the service as servingctl:pool)."
  type        = string
}

variable "capacity_provider" {
  description = "Capacity provider of the profile's compute pool."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the target group."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the awsvpc tasks."
  type        = list(string)
}

variable "task_security_group_ids" {
  description = "Security groups of the tasks (admit the ALB on container_port)."
  type        = list(string)
}

variable "listener_arn" {
  description = "ALB listener the header rule attaches to."
  type        = string
}

variable "listener_priority" {
  description = "Priority of the header rule (unique per listener)."
  type        = number

  validation {
    condition     = var.listener_priority >= 1 && var.listener_priority <= 50000
    error_message = "listener_priority must be 1..50000."
  }
}

variable "routing_header_name" {
  description = "Header the listener rule matches; its value is the profile name."
  type        = string
  default     = "X-LLM-Profile"
}

variable "image" {
  description = "Container image of the model server (pin a tag or digest)."
  type        = string

  validation {
    condition     = length(var.image) > 0 && !endswith(var.image, ":latest")
    error_message = "image must be set and pinned (not :latest)."
  }
}

variable "vllm_version" {
  description = "vLLM version in the image, recorded in the registry."
  type        = string
  default     = null
}

variable "model_id" {
  description = "Model repository id, e.g. nvidia/DeepSeek-V4-Flash-NVFP4."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$", var.model_id))
    error_message = "model_id must look like org/name."
  }
}

variable "revision" {
  description = "Pinned model revision (full commit hash) or null."
  type        = string
  default     = null
}

variable "vllm" {
  description = "Typed vLLM options; the command line and CUDA-graph capture sizes are derived from them (vllm.tf)."
  type = object({
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

  validation {
    condition     = var.vllm.max_num_seqs >= 1 && var.vllm.speculative_tokens >= 0 && var.vllm.speculative_tokens <= 8 && var.vllm.max_num_seqs * (1 + var.vllm.speculative_tokens) <= 16384
    error_message = "vllm.max_num_seqs must be >= 1, vllm.speculative_tokens 0..8, and their capture maximum max_num_seqs x (1 + speculative_tokens) at most 16384."
  }
  validation {
    condition     = var.vllm.tensor_parallel_size >= 1 && var.vllm.tensor_parallel_size <= 16
    error_message = "vllm.tensor_parallel_size (GPUs reserved by the task) must be 1..16."
  }
}

variable "container_port" {
  description = "Port vLLM listens on."
  type        = number
  default     = 8000
}

variable "task_cpu" {
  description = "Task CPU units (1024 = 1 vCPU)."
  type        = number

  validation {
    condition     = var.task_cpu >= 256
    error_message = "task_cpu must be at least 256."
  }
}

variable "task_memory_mib" {
  description = "Task memory in MiB (leave room for the ECS agent on the instance)."
  type        = number

  validation {
    condition     = var.task_memory_mib >= 512
    error_message = "task_memory_mib must be at least 512."
  }
}

variable "model_load_s" {
  description = "Seconds the model needs from task start to a healthy /health (prefetch + load + CUDA-graph capture); the service's health-check grace period."
  type        = number
  default     = 1800

  validation {
    condition     = var.model_load_s >= 60 && var.model_load_s <= 7200
    error_message = "model_load_s (the health-check grace period; the root module derives it as 2 weights passes + load_allowance_s) must be 60..7200: raise the pool's cache_throughput_mibps or set the profile's model_load_s."
  }
}

variable "deregistration_delay_s" {
  description = "Target group deregistration delay; short so stop does not wait on idle connections."
  type        = number
  default     = 30

  validation {
    condition     = var.deregistration_delay_s >= 0 && var.deregistration_delay_s <= 30
    error_message = "deregistration_delay_s must be 0..30 seconds."
  }
}

variable "model_cache_path" {
  description = "Host directory of the Hugging Face cache, mounted at /root/.cache/huggingface."
  type        = string
  default     = "/var/lib/llm-model-cache"
}

variable "weights_source" {
  description = "s3: an init container syncs the model's Hugging Face cache tree from S3 (gateway endpoint) and vLLM runs offline; hub: vLLM downloads through NAT."
  type        = string
  default     = "s3"

  validation {
    condition     = contains(["s3", "hub"], var.weights_source)
    error_message = "weights_source must be s3 or hub."
  }
}

variable "weights_bucket" {
  description = "S3 bucket of the Hugging Face cache trees (required when weights_source = s3)."
  type        = string
  default     = null

  validation {
    condition     = var.weights_bucket == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", coalesce(var.weights_bucket, "x")))
    error_message = "weights_bucket must be an S3 bucket name or null."
  }
}

variable "weights_prefix" {
  description = "Key prefix in weights_bucket holding hub/ style trees models--<org>--<name>/."
  type        = string
  default     = "hf-hub"
}

variable "prefetch_image" {
  description = "Image of the weight prefetch init container (AWS CLI v2, pinned)."
  type        = string
  default     = "public.ecr.aws/aws-cli/aws-cli:2.22.0"
}

variable "hub_token_secret_arn" {
  description = "Secrets Manager ARN of the Hugging Face token (HF_TOKEN) or null."
  type        = string
  default     = null
}

variable "log_retention_days" {
  description = "Retention of the model server log group."
  type        = number
  default     = 365
}

variable "min_replicas" {
  description = "Tasks a start brings up and waits healthy for; the scalable target's floor while the profile runs."
  type        = number
  default     = 1
}

variable "max_replicas" {
  description = "Most tasks service auto scaling may run; above 1 the module adds the scalable target and its target tracking policy."
  type        = number
  default     = 1

  validation {
    condition     = var.max_replicas >= 1 && var.max_replicas <= 16
    error_message = "max_replicas must be 1..16."
  }
}

variable "scaling_metric" {
  description = "requests-per-replica (servingctl/RequestsPerReplica, published by the sweep) or alb-request-count (ALBRequestCountPerTarget)."
  type        = string
  default     = "requests-per-replica"

  validation {
    condition     = contains(["requests-per-replica", "alb-request-count"], var.scaling_metric)
    error_message = "scaling_metric must be requests-per-replica or alb-request-count."
  }
}

variable "scaling_target" {
  description = "The metric's value per replica target tracking holds (requests per replica, or ALB requests per target per minute)."
  type        = number
  default     = 4
}

variable "scale_in_cooldown_s" {
  description = "Seconds after a scale-in before the next one."
  type        = number
  default     = 300
}

variable "scale_out_cooldown_s" {
  description = "Seconds after a scale-out before the next one."
  type        = number
  default     = 60
}

variable "alb_arn_suffix" {
  description = "The ALB's ARN suffix (ALBRequestCountPerTarget's resource label)."
  type        = string
  default     = ""
}

variable "load_format" {
  description = "sync: the prefetch container syncs the weights to the instance volume and vLLM loads them from there; runai_streamer: no prefetch, vLLM streams the safetensors from s3://<weights_bucket>/<prefix>/models--<org>--<name>/snapshots/<revision> with the Run:ai model streamer (--load-format runai_streamer; needs weights_source = s3 and a pinned revision)."
  type        = string
  default     = "sync"

  validation {
    condition     = contains(["sync", "runai_streamer"], var.load_format)
    error_message = "load_format must be sync or runai_streamer."
  }
}

variable "wake_on_request" {
  description = "While the profile is not READY its rule forwards to the waker (the controller points it at the model once READY and back before any scale-in)."
  type        = bool
  default     = false
}

variable "waker_target_group_arn" {
  description = "The waker's Lambda target group (root module); required by wake_on_request."
  type        = string
  default     = null

  validation {
    condition     = !var.wake_on_request || var.waker_target_group_arn != null
    error_message = "waker_target_group_arn is required with wake_on_request: the rule forwards there while the profile sleeps."
  }
}
