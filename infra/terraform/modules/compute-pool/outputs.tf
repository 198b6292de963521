output "asg_name" {
  description = "Auto Scaling group name."
  value       = aws_autoscaling_group.this.name
}

output "asg_arn" {
  description = "Auto Scaling group ARN."
  value       = aws_autoscaling_group.this.arn
}

output "capacity_provider_name" {
  description = "ECS capacity provider name."
  value       = aws_ecs_capacity_provider.this.name
}

output "launch_template_id" {
  description = "Launch template id."
  value       = aws_launch_template.this.id
}
