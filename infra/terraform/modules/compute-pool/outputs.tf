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
  description = "Launch template id of the primary instance type."
  value       = aws_launch_template.this["primary"].id
}

output "launch_template_arns" {
  description = "ARNs of every launch template of the pool (primary and alternates): the controller may launch through these only."
  value       = [for t in aws_launch_template.this : t.arn]
}

output "alternates" {
  description = "The alternate instance types in order, each with its launch template id (the controller's capacity fallback)."
  value       = [for t in var.alternate_instance_types : { instance_type = t, launch_template_id = aws_launch_template.this[t].id }]
}

output "warm_pool" {
  description = "The warm pool as planned (pool state, minimum size, reuse on scale-in), null without one."
  value       = one(aws_autoscaling_group.this.warm_pool)
}

output "launch_template" {
  description = "Launch template settings as planned: metadata options, decoded user data and the root (model cache) volume."
  value = {
    metadata_options = one(aws_launch_template.this["primary"].metadata_options)
    user_data        = base64decode(aws_launch_template.this["primary"].user_data)
    root_volume      = one(one(aws_launch_template.this["primary"].block_device_mappings).ebs)
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

output "prepare" {
  description = "The warm pool's prepare step: its launch lifecycle hook (null without one) and what it prepares."
  value = {
    hook     = one(aws_autoscaling_lifecycle_hook.prepare[*])
    profiles = var.prepare_profiles
    # The weights' key prefixes the instance role may read for it.
    weights_keys = local.prepare_weights
  }
}
