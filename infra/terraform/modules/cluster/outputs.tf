output "name" {
  description = "ECS cluster name."
  value       = aws_ecs_cluster.this.name
}

output "arn" {
  description = "ECS cluster ARN."
  value       = aws_ecs_cluster.this.arn
}

output "instance_profile_arn" {
  description = "Instance profile of the GPU container instances."
  value       = aws_iam_instance_profile.instance.arn
}

output "instance_role_arn" {
  description = "Role of the GPU container instances (the controller passes it when it switches a pool's launch template)."
  value       = aws_iam_role.instance.arn
}

output "task_security_group_id" {
  description = "Security group of the model server tasks."
  value       = aws_security_group.tasks.id
}

output "instance_role_name" {
  description = "Name of the container instances' IAM role (a pool's warm pool prepare step adds its grants to it)."
  value       = aws_iam_role.instance.name
}
