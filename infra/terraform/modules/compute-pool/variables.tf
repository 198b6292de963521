variable "name" {
  description = "Name of the ASG and capacity provider (the stack name plus the pool name)."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9_-]{0,54}$", var.name)) && !can(regex("^(aws|ecs|fargate)", lower(var.name)))
    error_message = "name must be 1..55 letters, digits, hyphens or underscores and must not start with aws, ecs or fargate (capacity provider rule)."
  }
}

variable "pool" {
  description = "Pool name as in the registry; tagged as servingctl:pool on the ASG, instances and container instances."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,62}$", var.pool))
    error_message = "pool must match ^[a-z0-9][a-z0-9-]{0,62}$."
  }
}

variable "cluster_name" {
  description = "ECS cluster the instances register to."
  type        = string
}

variable "instance_profile_arn" {
  description = "Instance profile with the ECS agent's permissions."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the instance security group."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets the ASG may launch in (two AZs improve the odds of GPU capacity)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "subnet_ids must list at least one subnet."
  }
}

variable "instance_type" {
  description = "GPU instance type, e.g. g7e.12xlarge."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like g7e.12xlarge."
  }
}

variable "root_volume_gib" {
  description = "Size of the encrypted gp3 root volume (image layers plus model cache unless on instance store)."
  type        = number
  default     = 200

  validation {
    condition     = var.root_volume_gib >= 100 && var.root_volume_gib <= 16384
    error_message = "root_volume_gib must be 100..16384."
  }
}

variable "instance_warmup_s" {
  description = "Capacity provider instance warm-up period in seconds."
  type        = number
  default     = 300

  validation {
    condition     = var.instance_warmup_s >= 0 && var.instance_warmup_s <= 10000
    error_message = "instance_warmup_s must be 0..10000."
  }
}

variable "managed_termination_protection" {
  description = "ECS managed termination protection. Off by default: SetDesiredCapacity(0) then terminates at once; when on, the controller must clear scale-in protection first (its stop flow does)."
  type        = bool
  default     = false
}

variable "model_cache_path" {
  description = "Host directory of the model cache (mounted into the tasks)."
  type        = string
  default     = "/var/lib/llm-model-cache"

  validation {
    condition     = can(regex("^/[A-Za-z0-9/_.-]+$", var.model_cache_path))
    error_message = "model_cache_path must be an absolute path."
  }
}

variable "model_cache_on_instance_store" {
  description = "Format and mount the first NVMe instance-store disk at model_cache_path when the instance type has one."
  type        = bool
  default     = false
}

variable "cache_throughput_mibps" {
  description = "Provisioned gp3 throughput (MiB/s) of the root volume holding the model cache; the root module checks the gp3 limits."
  type        = number
  default     = 1000
}

variable "cache_iops" {
  description = "Provisioned gp3 IOPS of the root volume holding the model cache."
  type        = number
  default     = 16000
}

variable "alternate_instance_types" {
  description = "Instance types of the same GPU count and GPU memory the controller falls back to, in order, when the primary type has no capacity (the root module checks the shapes)."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.alternate_instance_types) <= 3 && alltrue([for t in var.alternate_instance_types : can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", t))])
    error_message = "alternate_instance_types must list at most 3 instance types like g6e.12xlarge."
  }
}

variable "warm_pool" {
  description = "ASG warm pool of Stopped instances (null: none). reuse_on_scale_in returns an instance to the pool at stop; see the root module's pools variable for why it is off by default. prepare: a launch lifecycle hook holds each new warm-pool instance in Warmed:Pending:Wait while its user data pulls the images, syncs the weights and fills the compile cache of prepare_profiles, then completes the hook (ABANDON after prepare_timeout_s). max_group_prepared_capacity bounds warm pool + group (null: the group's MaxSize)."
  type = object({
    min_size                    = number
    reuse_on_scale_in           = bool
    prepare                     = optional(bool, false)
    prepare_timeout_s           = optional(number, 3600)
    max_group_prepared_capacity = optional(number)
  })
  default = null

  validation {
    condition     = var.warm_pool == null || try(var.warm_pool.prepare_timeout_s >= 30 && var.warm_pool.prepare_timeout_s <= 7200, false)
    error_message = "warm_pool.prepare_timeout_s must be 30..7200 seconds (a lifecycle hook's heartbeat timeout)."
  }
}

variable "prepare_profiles" {
  description = "What the warm pool's prepare step puts on a new instance's volume, one entry per profile of the pool: its task definition family (image and vLLM command read from it at boot), the weights' key prefix in weights_bucket (null: none from S3), the host cache directory and synced marker, and the GPUs vLLM runs on."
  type = list(object({
    name        = string
    family      = string
    weights_key = optional(string)
    cache_dir   = string
    marker      = string
    gpus        = number
  }))
  default = []
}

variable "instance_role_name" {
  description = "The instances' role (cluster module): the prepare step's grants (complete this group's hook, read the weights it syncs) are added to it."
  type        = string
  default     = null
}

variable "weights_bucket" {
  description = "Name of the weights bucket the prepare step reads (null: none)."
  type        = string
  default     = null
}


variable "max_size" {
  description = "The group's MaxSize: one instance per replica of the largest max_replicas among the pool's profiles."
  type        = number
  default     = 1

  validation {
    condition     = var.max_size >= 1 && var.max_size <= 16 && floor(var.max_size) == var.max_size
    error_message = "max_size must be an integer from 1 to 16 (MAX_REPLICAS in the controller's registry models)."
  }
}
