variable "name" {
  description = "ECS cluster name, also the prefix of the instance role and task security group."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9_-]{0,40}$", var.name))
    error_message = "name must be 1..41 letters, digits, hyphens or underscores."
  }
}

variable "vpc_id" {
  description = "VPC of the task security group."
  type        = string
}

variable "alb_security_group_id" {
  description = "Security group of the ALB, admitted on task_port (health checks and client requests)."
  type        = string
}

variable "controller_security_group_id" {
  description = "Security group of the controller's in-VPC Lambdas, admitted on task_port: the sweep reads each model server's /metrics at the task's address, never through the ALB, so RequestCount counts client requests only."
  type        = string
}

variable "task_port" {
  description = "Port the model servers listen on."
  type        = number
  default     = 8000

  validation {
    condition     = var.task_port >= 1 && var.task_port <= 65535
    error_message = "task_port must be 1..65535."
  }
}
