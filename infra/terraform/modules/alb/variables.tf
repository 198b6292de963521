variable "name" {
  description = "Name of the ALB and prefix of its security groups (32 characters at most)."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9-]{0,31}$", var.name))
    error_message = "name must be 1..32 letters, digits or hyphens (ALB name rules)."
  }
}

variable "vpc_id" {
  description = "VPC of the ALB."
  type        = string
}

variable "vpc_cidr" {
  description = "VPC CIDR: the ALB may reach targets on target_port only inside it."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets (two AZs) of the internal ALB."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "subnet_ids must list at least two subnets in different AZs."
  }
}

variable "client_cidrs" {
  description = "CIDRs inside the VPC allowed to call the ALB on port 80, besides the Lambda security group."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.client_cidrs : can(cidrnetmask(c)) && c != "0.0.0.0/0"])
    error_message = "client_cidrs must be IPv4 CIDRs inside the VPC, never 0.0.0.0/0."
  }
}

variable "idle_timeout_s" {
  description = "ALB idle timeout; long generations stream for minutes."
  type        = number
  default     = 300

  validation {
    condition     = var.idle_timeout_s >= 60 && var.idle_timeout_s <= 4000
    error_message = "idle_timeout_s must be 60..4000 seconds."
  }
}

variable "target_port" {
  description = "Port of the model servers (vLLM listens on 8000)."
  type        = number
  default     = 8000

  validation {
    condition     = var.target_port >= 1 && var.target_port <= 65535
    error_message = "target_port must be 1..65535."
  }
}

variable "region" {
  description = "Region of the ALB: it decides who delivers access logs (the region's ELB account, or the log delivery service)."
  type        = string
}

variable "access_logs" {
  description = "Write the ALB's access logs to an S3 bucket of their own (the traffic trace of `servingctl costs simulate --format alb`)."
  type        = bool
  default     = false
}
