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

output "task_definition_arn" {
  description = "Task definition ARN (revision)."
  value       = aws_ecs_task_definition.this.arn
}

output "serving" {
  description = "The registry's serving block: options, derived CUDA-graph capture sizes and the deployed command line."
  value       = local.serving
}
