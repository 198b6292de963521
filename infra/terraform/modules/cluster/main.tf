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

# AWS managed policies: the ECS agent's own permissions, and SSM Session Manager for debugging
# without any inbound port.
resource "aws_iam_role_policy_attachment" "instance_ecs" {
  role       = aws_iam_role.instance.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role"
}

resource "aws_iam_role_policy_attachment" "instance_ssm" {
  role       = aws_iam_role.instance.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
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
