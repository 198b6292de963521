variable "name" {
  description = "Name prefix of the network resources."
  type        = string

  validation {
    condition     = length(var.name) > 0
    error_message = "name must not be empty."
  }
}

variable "availability_zones" {
  description = "The two AZs of the private subnets (pick zones that offer the pools' GPU instance types)."
  type        = list(string)

  validation {
    condition     = length(var.availability_zones) == 2 && length(distinct(var.availability_zones)) == 2
    error_message = "availability_zones must name exactly two different zones."
  }
}

variable "cidr" {
  description = "IPv4 CIDR of the VPC, /18 or larger: two /20 private subnets and one /28 NAT subnet are carved from it."
  type        = string

  validation {
    condition     = can(cidrnetmask(var.cidr)) && tonumber(split("/", var.cidr)[1]) <= 18
    error_message = "cidr must be an IPv4 CIDR of size /18 or larger (two /20 private subnets and a /28 NAT subnet at its end), e.g. 10.40.0.0/16."
  }
}

variable "region" {
  description = "Region of the VPC (the provider's, validated by the root module): names the S3 gateway endpoint service."
  type        = string
}

variable "egress" {
  description = "How the private subnets reach AWS and the internet: nat (a NAT gateway; images and weights from anywhere) or endpoints (no NAT: interface endpoints for ECR, logs, SSM, ECS and STS; images from ECR, weights from S3)."
  type        = string
  default     = "nat"

  validation {
    condition     = contains(["nat", "endpoints"], var.egress)
    error_message = "egress must be nat or endpoints."
  }
}
