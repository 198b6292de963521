# Network: a VPC with two private subnets (two AZs) for instances, tasks, the ALB and in-VPC
# Lambdas; an S3 gateway endpoint so model weights come from S3 without NAT data processing charges.
# egress = "nat": one public subnet that only holds the NAT gateway (the internet: Docker Hub,
# Hugging Face). egress = "endpoints": no NAT and no route out; the AWS APIs the ECS agent, the
# instances and the model task call are reached through interface endpoints instead.

# GPU instance types are offered in some AZs only: the caller names the two zones explicitly.
data "aws_availability_zones" "chosen" {
  state = "available"

  filter {
    name   = "zone-name"
    values = var.availability_zones
  }
}

locals {
  azs = data.aws_availability_zones.chosen.names
  nat = var.egress == "nat" ? 1 : 0
  # What ECS on EC2 and the model task call when there is no NAT: the image pull (ecr.api, ecr.dkr,
  # the layers from S3 through the gateway), the awslogs driver (logs), the agent (ecs, ecs-agent,
  # ecs-telemetry), SSM (ssm: the ECS-optimized AMI's agent and Session Manager) and role credentials
  # for the task's regional STS calls (sts).
  interface_endpoints = var.egress == "endpoints" ? toset(["ecr.api", "ecr.dkr", "logs", "ssm", "ecs", "ecs-agent", "ecs-telemetry", "sts"]) : toset([])
}

resource "aws_vpc" "this" {
  lifecycle {
    precondition {
      condition     = length(data.aws_availability_zones.chosen.names) == 2
      error_message = "availability_zones must name two available zones of the region: ${join(", ", var.availability_zones)}."
    }
  }

  #checkov:skip=CKV2_AWS_11:Flow logs are left to the account's central logging; this PoC VPC admits no inbound traffic from outside.
  cidr_block           = var.cidr
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = { Name = var.name }
}

# The default security group denies everything, so nothing lands in it by accident.
resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = "${var.name}-default-deny" }
}

resource "aws_subnet" "private" {
  count = 2

  vpc_id                  = aws_vpc.this.id
  cidr_block              = cidrsubnet(var.cidr, 20 - tonumber(split("/", var.cidr)[1]), count.index)
  availability_zone       = local.azs[count.index]
  map_public_ip_on_launch = false

  tags = { Name = "${var.name}-private-${local.azs[count.index]}" }
}

# Holds the NAT gateway only; nothing else is placed here and nothing gets a public IP.
resource "aws_subnet" "nat" {
  count = local.nat

  vpc_id                  = aws_vpc.this.id
  cidr_block              = cidrsubnet(var.cidr, 28 - tonumber(split("/", var.cidr)[1]), pow(2, 28 - tonumber(split("/", var.cidr)[1])) - 1)
  availability_zone       = local.azs[0]
  map_public_ip_on_launch = false

  tags = { Name = "${var.name}-nat" }
}

resource "aws_internet_gateway" "this" {
  count = local.nat

  vpc_id = aws_vpc.this.id
  tags   = { Name = var.name }
}

resource "aws_eip" "nat" {
  count = local.nat

  domain = "vpc"
  tags   = { Name = "${var.name}-nat" }
}

resource "aws_nat_gateway" "this" {
  count = local.nat

  allocation_id = aws_eip.nat[0].id
  subnet_id     = aws_subnet.nat[0].id
  tags          = { Name = var.name }

  depends_on = [aws_internet_gateway.this]
}

resource "aws_route_table" "nat" {
  count = local.nat

  vpc_id = aws_vpc.this.id
  tags   = { Name = "${var.name}-nat" }
}

resource "aws_route" "nat_internet" {
  count = local.nat

  route_table_id         = aws_route_table.nat[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "nat" {
  count = local.nat

  subnet_id      = aws_subnet.nat[0].id
  route_table_id = aws_route_table.nat[0].id
}

resource "aws_route_table" "private" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = "${var.name}-private" }
}

resource "aws_route" "private_nat" {
  count = local.nat

  route_table_id         = aws_route_table.private.id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.this[0].id
}

resource "aws_route_table_association" "private" {
  count = 2

  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private.id
}

# S3 traffic from the private subnets bypasses NAT: no 0.045 USD/GB processing charge on weights.
resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]

  tags = { Name = "${var.name}-s3" }
}

# DynamoDB from the in-VPC Lambdas (bench_worker writes results, the sweep reads profiles) without
# NAT; a gateway endpoint costs nothing.
resource "aws_vpc_endpoint" "dynamodb" {
  count = var.egress == "endpoints" ? 1 : 0

  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.dynamodb"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]

  tags = { Name = "${var.name}-dynamodb" }
}

resource "aws_security_group" "endpoints" {
  count = var.egress == "endpoints" ? 1 : 0

  name        = "${var.name}-endpoints"
  description = "HTTPS from the VPC to its interface endpoints"
  vpc_id      = aws_vpc.this.id

  ingress {
    description = "HTTPS from the VPC"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = [var.cidr]
  }

  tags = { Name = "${var.name}-endpoints" }
}

# One interface endpoint per service, in both private subnets, answering the service's usual name
# (private DNS): the agent and the SDKs need no other configuration.
resource "aws_vpc_endpoint" "interface" {
  for_each = local.interface_endpoints

  vpc_id              = aws_vpc.this.id
  service_name        = "com.amazonaws.${var.region}.${each.key}"
  vpc_endpoint_type   = "Interface"
  subnet_ids          = aws_subnet.private[*].id
  security_group_ids  = [aws_security_group.endpoints[0].id]
  private_dns_enabled = true

  tags = { Name = "${var.name}-${each.key}" }
}
