# Outputs the SAM stack takes as parameters (mapping in sam-parameters.json) and a few for people.

output "vpc_id" {
  description = "VPC of the data plane."
  value       = module.network.vpc_id
}

output "private_subnet_ids" {
  description = "Private subnets (two AZs) for the in-VPC Lambdas (smoke_test, bench_worker)."
  value       = module.network.private_subnet_ids
}

output "lambda_security_group_id" {
  description = "Security group for the in-VPC Lambdas; the only group the ALB admits besides client_cidrs."
  value       = module.alb.lambda_security_group_id
}

output "registry_path" {
  description = "SSM path of the registry's parameters: index, pools/<name>, profiles/<name> (SERVINGCTL_REGISTRY=ssm:<path>)."
  value       = local.registry_path
  # Known once every parameter under it is written.
  depends_on = [aws_ssm_parameter.registry_index]
}

output "registry_path_arn" {
  description = "ARN of the registry's path, for ssm:GetParametersByPath scoping (authorised on the path)."
  value       = trimsuffix(aws_ssm_parameter.registry_index.arn, "/index")
}

output "cluster_arn" {
  description = "ECS cluster ARN (ecs:cluster condition of task and container-instance calls)."
  value       = module.cluster.arn
}

output "service_arns" {
  description = "ECS service ARNs of every profile (ecs:UpdateService / DescribeServices scoping)."
  value       = [for p in module.profile : p.service_arn]
}

output "listener_rule_arns" {
  description = "Every profile's header rule (template.yaml ListenerRuleArns: the controller's ModifyRule scoping)."
  value       = [for p in module.profile : p.listener_rule_arn]
}

output "asg_arns" {
  description = "Auto Scaling group ARNs of every pool (SetDesiredCapacity, UpdateAutoScalingGroup, SetInstanceProtection scoping)."
  value       = [for p in module.pool : p.asg_arn]
}

output "model_log_group_arns" {
  description = "Log groups of every profile's containers, with :* (logs:FilterLogEvents scoping for the start timeline)."
  value       = [for p in module.profile : "${p.log_group_arn}:*"]
}

output "target_group_arns" {
  description = "Target group ARNs of every profile."
  value       = [for p in module.profile : p.target_group_arn]
}

output "alb_arn" {
  description = "ARN of the internal ALB."
  value       = module.alb.arn
}

output "endpoint_url" {
  description = "Base URL of the internal ALB; send X-LLM-Profile: <profile> to reach a profile."
  value       = module.alb.endpoint_url
}

output "capacity_provider_names" {
  description = "ECS capacity provider of every pool, keyed by pool name."
  value       = { for name, p in module.pool : name => p.capacity_provider_name }
}

output "launch_template_arns" {
  description = "Launch template ARNs of every pool's instance types: the controller's capacity fallback launches through these only (SAM parameter LaunchTemplateArns)."
  value       = flatten([for p in module.pool : p.launch_template_arns])
}

output "instance_role_arn" {
  description = "Role of the GPU container instances, which the controller passes when it switches a pool's launch template (SAM parameter InstanceRoleArn)."
  value       = module.cluster.instance_role_arn
}

output "alb_access_logs_bucket" {
  description = "S3 bucket of the ALB's access logs (null unless alb_access_logs): `servingctl costs simulate --format alb` reads its objects."
  value       = module.alb.access_logs_bucket
}

output "egress" {
  description = "The egress option deployed and what it runs while idle (NAT gateways, interface endpoints per AZ): `servingctl costs idle --terraform-dir` reads it."
  value       = module.network.egress
}
