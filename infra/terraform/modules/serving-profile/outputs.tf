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

output "listener_rule_arn" {
  description = "The profile's header rule (the controller's ModifyRule grant; the waker's while it sleeps)."
  value       = one(concat(aws_lb_listener_rule.this[*].arn, aws_lb_listener_rule.wake[*].arn))
}

output "rule_forwards_to" {
  description = "The target group the rule forwards to as applied: the waker's for a wake-on-request profile (the controller moves it from there)."
  value       = one(concat(aws_lb_listener_rule.this[*].action[0].target_group_arn, aws_lb_listener_rule.wake[*].action[0].target_group_arn))
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
    priority = one(concat(aws_lb_listener_rule.this[*].priority, aws_lb_listener_rule.wake[*].priority))
    header   = one(one(one(concat(aws_lb_listener_rule.this, aws_lb_listener_rule.wake)).condition).http_header)
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

output "replicas" {
  description = "Replica bounds and, above one, the service auto scaling target and its target tracking policy."
  value = {
    min_replicas = var.min_replicas
    max_replicas = var.max_replicas
    target       = one(aws_appautoscaling_target.replicas[*])
    policy       = one(aws_appautoscaling_policy.replicas[*])
  }
}

output "reads_weights_from_s3" {
  description = "Whether the task role may read this model's weights in S3 (false when they come from the hub)."
  value       = length(aws_iam_role_policy.weights) == 1
}
