# The two egress options: a NAT gateway (the default), or no NAT and VPC endpoints for what ECS on EC2
# and the model task call. The endpoints option refuses a profile that needs the internet.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  network = {
    name               = "llm"
    region             = "us-east-1"
    cidr               = "10.40.0.0/16"
    availability_zones = ["us-east-1a", "us-east-1b"]
  }
}

run "nat_by_default" {
  command = plan

  module {
    source = "./modules/network"
  }

  variables {
    name               = var.network.name
    region             = var.network.region
    cidr               = var.network.cidr
    availability_zones = var.network.availability_zones
  }

  assert {
    condition     = length(aws_nat_gateway.this) == 1 && length(aws_route.private_nat) == 1 && length(aws_eip.nat) == 1
    error_message = "the default egress is one NAT gateway with its EIP and the private subnets' default route"
  }
  assert {
    condition     = length(aws_vpc_endpoint.interface) == 0 && length(aws_vpc_endpoint.dynamodb) == 0
    error_message = "with NAT no interface endpoint is billed"
  }
  assert {
    condition     = jsonencode(output.egress) == jsonencode({ mode = "nat", nat_gateways = 1, interface_endpoints = [], endpoint_azs = 0 })
    error_message = "the egress output says what runs while idle: ${jsonencode(output.egress)}"
  }
}

run "endpoints_instead_of_nat" {
  command = plan

  module {
    source = "./modules/network"
  }

  variables {
    name               = var.network.name
    region             = var.network.region
    cidr               = var.network.cidr
    availability_zones = var.network.availability_zones
    egress             = "endpoints"
  }

  assert {
    condition     = length(aws_nat_gateway.this) == 0 && length(aws_eip.nat) == 0 && length(aws_internet_gateway.this) == 0 && length(aws_subnet.nat) == 0
    error_message = "no NAT gateway, EIP, internet gateway or NAT subnet without NAT"
  }
  assert {
    condition     = length(aws_route.private_nat) == 0
    error_message = "the private subnets have no default route: nothing leaves the VPC"
  }
  assert {
    condition     = jsonencode(sort(keys(aws_vpc_endpoint.interface))) == jsonencode(["ecr.api", "ecr.dkr", "ecs", "ecs-agent", "ecs-telemetry", "logs", "ssm", "sts"])
    error_message = "ECS on EC2 and the model task need ECR (api, dkr), logs, SSM, ECS (ecs, agent, telemetry) and STS: ${jsonencode(keys(aws_vpc_endpoint.interface))}"
  }
  assert {
    condition = alltrue([for name, e in aws_vpc_endpoint.interface :
      e.service_name == "com.amazonaws.us-east-1.${name}" && e.vpc_endpoint_type == "Interface" && e.private_dns_enabled
    ])
    error_message = "each interface endpoint serves its service's usual name (private DNS)"
  }
  assert {
    condition     = aws_vpc_endpoint.s3.vpc_endpoint_type == "Gateway" && aws_vpc_endpoint.dynamodb[0].service_name == "com.amazonaws.us-east-1.dynamodb"
    error_message = "S3 (image layers, weights) and DynamoDB (the in-VPC Lambdas) through free gateway endpoints"
  }
  assert {
    condition     = jsonencode([for rule in aws_security_group.endpoints[0].ingress : [rule.from_port, rule.to_port, rule.protocol, rule.cidr_blocks]]) == jsonencode([[443, 443, "tcp", ["10.40.0.0/16"]]])
    error_message = "the endpoints admit HTTPS from the VPC only"
  }
  assert {
    condition     = output.egress.mode == "endpoints" && output.egress.nat_gateways == 0 && length(output.egress.interface_endpoints) == 8 && output.egress.endpoint_azs == 2
    error_message = "the egress output says what runs while idle: ${jsonencode(output.egress)}"
  }
}

run "an_unknown_egress_is_refused" {
  command = plan

  module {
    source = "./modules/network"
  }

  variables {
    name               = var.network.name
    region             = var.network.region
    cidr               = var.network.cidr
    availability_zones = var.network.availability_zones
    egress             = "none"
  }

  expect_failures = [var.egress]
}

# The reference profiles pull vllm/vllm-openai from Docker Hub: without NAT they could not start.
run "endpoints_refuse_an_image_outside_ecr" {
  command = plan

  variables {
    egress               = "endpoints"
    model_weights_bucket = "my-llm-weights-123456789012"
  }

  expect_failures = [var.egress]
}
