# ECS cluster on EC2, the instance role shared by every pool and the security group of the
# awsvpc tasks (model servers), which admits the ALB and the controller's in-VPC Lambdas.

resource "aws_ecs_cluster" "this" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "instance" {
  name               = "${var.name}-ecs-instance"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
}

# Only what the instance's own agents call (no AWS managed policy: AmazonEC2ContainerServiceforEC2Role
# adds ECR pulls and log writes for any repository and group, AmazonSSMManagedInstanceCore reads every
# parameter of the account). Image pulls and task logs go through each task's execution role, the AMI
# is resolved by Terraform, and nothing on the instance reads a parameter, so no ssm:GetParameter*.
locals {
  container_instances_arn = "${replace(aws_ecs_cluster.this.arn, ":cluster/", ":container-instance/")}/*"
}

data "aws_iam_policy_document" "instance" {
  # The ECS agent: register to this cluster (with the pool tag of ECS_CONTAINER_INSTANCE_TAGS, which
  # needs ecs:TagResource at registration) and report container, task and attachment state to it.
  statement {
    sid = "AgentRegistersInCluster"
    actions = [
      "ecs:RegisterContainerInstance",
      "ecs:DeregisterContainerInstance",
      "ecs:SubmitAttachmentStateChanges",
      "ecs:SubmitContainerStateChange",
      "ecs:SubmitTaskStateChange",
    ]
    resources = [aws_ecs_cluster.this.arn]
  }

  statement {
    sid       = "AgentTagsItsRegistration"
    actions   = ["ecs:TagResource"]
    resources = [local.container_instances_arn]
    condition {
      test     = "StringEquals"
      variable = "ecs:CreateAction"
      values   = ["RegisterContainerInstance"]
    }
  }

  # The agent's long poll for work and its telemetry, on this cluster's container instances.
  statement {
    sid       = "AgentPollsInCluster"
    actions   = ["ecs:Poll", "ecs:StartTelemetrySession"]
    resources = [local.container_instances_arn]
  }

  # DiscoverPollEndpoint has no resource-level permission (Service Authorization Reference): "*" is
  # the only resource it can be granted on; it returns an endpoint URL and changes nothing.
  statement {
    sid       = "AgentFindsPollEndpoint"
    actions   = ["ecs:DiscoverPollEndpoint"]
    resources = ["*"]
  }

  # Session Manager (shell on the instance without an inbound port): the SSM agent registers the
  # instance and opens its channels. ssmmessages has no resource-level permissions ("*" only).
  statement {
    sid       = "SessionManagerRegistersInstance"
    actions   = ["ssm:UpdateInstanceInformation"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:*:instance/*"]
  }

  statement {
    sid = "SessionManagerChannels"
    actions = [
      "ssmmessages:CreateControlChannel",
      "ssmmessages:CreateDataChannel",
      "ssmmessages:OpenControlChannel",
      "ssmmessages:OpenDataChannel",
    ]
    resources = ["*"]
  }
}

resource "aws_iam_role_policy" "instance" {
  name   = "ecs-agent-and-session-manager"
  role   = aws_iam_role.instance.id
  policy = data.aws_iam_policy_document.instance.json
}

resource "aws_iam_instance_profile" "instance" {
  name = "${var.name}-ecs-instance"
  role = aws_iam_role.instance.name
}

resource "aws_security_group" "tasks" {
  #checkov:skip=CKV2_AWS_5:Attached to the ECS services' awsvpc tasks in the serving-profile module (output task_security_group_id).
  name        = "${var.name}-tasks"
  description = "Model server tasks (awsvpc): port ${var.task_port} from the ALB and the controller"
  vpc_id      = var.vpc_id
  tags        = { Name = "${var.name}-tasks" }
}

resource "aws_vpc_security_group_ingress_rule" "tasks_from_alb" {
  security_group_id            = aws_security_group.tasks.id
  description                  = "Health checks and requests from the internal ALB"
  ip_protocol                  = "tcp"
  from_port                    = var.task_port
  to_port                      = var.task_port
  referenced_security_group_id = var.alb_security_group_id
}

# The sweep reads each model server's gauges (/metrics) at the task's address: a read through the ALB
# would count in the target group's RequestCount and keep an idle profile running forever.
resource "aws_vpc_security_group_ingress_rule" "tasks_from_controller" {
  security_group_id            = aws_security_group.tasks.id
  description                  = "Gauge reads (/metrics) of the controller's sweep, outside the ALB's RequestCount"
  ip_protocol                  = "tcp"
  from_port                    = var.task_port
  to_port                      = var.task_port
  referenced_security_group_id = var.controller_security_group_id
}

resource "aws_vpc_security_group_egress_rule" "controller_to_tasks" {
  security_group_id            = var.controller_security_group_id
  description                  = "The sweep's gauge reads (/metrics) at the model server tasks"
  ip_protocol                  = "tcp"
  from_port                    = var.task_port
  to_port                      = var.task_port
  referenced_security_group_id = aws_security_group.tasks.id
}

resource "aws_vpc_security_group_egress_rule" "tasks_https" {
  security_group_id = aws_security_group.tasks.id
  description       = "Image pulls, model hub and S3 over HTTPS"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

data "aws_partition" "current" {}
