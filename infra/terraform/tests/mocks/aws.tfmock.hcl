# Values the mock AWS provider returns for computed attributes: ARNs shaped like AWS's, because the
# provider validates the ARNs other resources are given (an applied run feeds them on).

mock_data "aws_iam_policy_document" {
  defaults = {
    json = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Action\":\"sts:AssumeRole\",\"Principal\":{\"Service\":\"ecs-tasks.amazonaws.com\"}}]}"
  }
}

mock_data "aws_partition" {
  defaults = { partition = "aws" }
}

mock_data "aws_availability_zones" {
  defaults = { names = ["us-east-1a", "us-east-1b"] }
}

mock_data "aws_ssm_parameter" {
  defaults = { value = "ami-0123456789abcdef0" }
}

mock_resource "aws_iam_role" {
  defaults = { arn = "arn:aws:iam::123456789012:role/mock" }
}

mock_resource "aws_iam_instance_profile" {
  defaults = { arn = "arn:aws:iam::123456789012:instance-profile/mock" }
}

mock_resource "aws_lb" {
  defaults = {
    arn      = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/self-hosted-llm-poc/0123456789abcdef"
    dns_name = "internal-self-hosted-llm-poc-123456789.us-east-1.elb.amazonaws.com"
  }
}

mock_resource "aws_lb_listener" {
  defaults = { arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/app/self-hosted-llm-poc/0123456789abcdef/0123456789abcdef" }
}

mock_resource "aws_lb_listener_rule" {
  defaults = { arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:listener-rule/app/self-hosted-llm-poc/0123456789abcdef/0123456789abcdef/0123456789abcdef" }
}

mock_resource "aws_lb_target_group" {
  defaults = { arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/llm-mock/0123456789abcdef" }
}

mock_resource "aws_ecs_cluster" {
  defaults = { arn = "arn:aws:ecs:us-east-1:123456789012:cluster/self-hosted-llm-poc" }
}

mock_resource "aws_ecs_service" {
  defaults = { id = "arn:aws:ecs:us-east-1:123456789012:service/self-hosted-llm-poc/mock" }
}

mock_resource "aws_ecs_task_definition" {
  defaults = { arn = "arn:aws:ecs:us-east-1:123456789012:task-definition/mock:1" }
}

mock_resource "aws_autoscaling_group" {
  defaults = { arn = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:00000000-0000-0000-0000-000000000000:autoScalingGroupName/mock" }
}

mock_resource "aws_ssm_parameter" {
  defaults = { arn = "arn:aws:ssm:us-east-1:123456789012:parameter/self-hosted-llm-poc/registry" }
}

mock_resource "aws_launch_template" {
  defaults = { id = "lt-0123456789abcdef0", latest_version = 1 }
}

mock_resource "aws_vpc" {
  defaults = { id = "vpc-0123456789abcdef0" }
}

mock_resource "aws_subnet" {
  defaults = { id = "subnet-0123456789abcdef0" }
}

mock_resource "aws_security_group" {
  defaults = { id = "sg-0123456789abcdef0" }
}

mock_data "aws_caller_identity" {
  defaults = { account_id = "123456789012" }
}

# us-east-1's Elastic Load Balancing account (AWS's access logs documentation).
mock_data "aws_elb_service_account" {
  defaults = { arn = "arn:aws:iam::127311923021:root" }
}

mock_resource "aws_s3_bucket" {
  defaults = { arn = "arn:aws:s3:::self-hosted-llm-poc-alb-logs-123456789012" }
}
