output "service_name" {
  description = "ECS service name."
  value       = aws_ecs_service.this.name
}

output "service_arn" {
  description = "ECS service ARN."
  value       = aws_ecs_service.this.id
}

output "served_model_name" {
  description = "Model name clients send."
  value       = var.served_model_name
}

output "target_group_arn" {
  description = "Target group ARN."
  value       = aws_lb_target_group.this.arn
}

output "log_group_arn" {
  description = "ARN of the containers' log group (awslogs)."
  value       = aws_cloudwatch_log_group.this.arn
}

output "task_definition_arn" {
  description = "Task definition ARN (revision)."
  value       = aws_ecs_task_definition.this.arn
}

output "serving" {
  description = "The registry's serving block: options, derived CUDA-graph capture sizes and the deployed command line."
  value       = local.serving
}

output "task_definition" {
  description = "The task definition as planned: network mode, cpu, memory and its container definitions (prefetch-weights first when weights come from S3, then vllm)."
  value = {
    network_mode = aws_ecs_task_definition.this.network_mode
    cpu          = aws_ecs_task_definition.this.cpu
    memory       = aws_ecs_task_definition.this.memory
    containers   = jsondecode(aws_ecs_task_definition.this.container_definitions)
  }
}

output "routing" {
  description = "The listener rule: priority and the header name and values it matches."
  value = {
    priority = aws_lb_listener_rule.this.priority
    header   = one(one(aws_lb_listener_rule.this.condition).http_header)
  }
}

output "health_check_grace_s" {
  description = "Health-check grace period of the ECS service (seconds)."
  value       = aws_ecs_service.this.health_check_grace_period_seconds
}

output "pull_repositories" {
  description = "Private ECR repository ARNs the execution role may pull from (none for Docker Hub or public ECR images)."
  value       = local.pull_repositories
}
