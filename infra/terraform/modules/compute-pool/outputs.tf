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

output "launch_template" {
  description = "Launch template settings as planned: metadata options, decoded user data and the root (model cache) volume."
  value = {
    metadata_options = one(aws_launch_template.this.metadata_options)
    user_data        = base64decode(aws_launch_template.this.user_data)
    root_volume      = one(one(aws_launch_template.this.block_device_mappings).ebs)
  }
}

output "capacity_provider" {
  description = "Capacity provider settings as planned (managed scaling, termination protection, draining) and the ASG's size and scale-in protection."
  value = {
    auto_scaling_group_provider = one(aws_ecs_capacity_provider.this.auto_scaling_group_provider)
    asg = {
      min_size              = aws_autoscaling_group.this.min_size
      max_size              = aws_autoscaling_group.this.max_size
      protect_from_scale_in = aws_autoscaling_group.this.protect_from_scale_in
    }
  }
}
