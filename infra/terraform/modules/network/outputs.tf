output "vpc_id" {
  description = "VPC id."
  value       = aws_vpc.this.id
}

output "vpc_cidr" {
  description = "VPC CIDR."
  value       = aws_vpc.this.cidr_block
}

output "private_subnet_ids" {
  description = "The two private subnets (one per AZ)."
  value       = aws_subnet.private[*].id
}

output "private_route_table_id" {
  description = "Route table of the private subnets (default route through NAT when egress is nat, S3 through the gateway endpoint)."
  value       = aws_route_table.private.id
}

output "s3_endpoint_id" {
  description = "S3 gateway endpoint id."
  value       = aws_vpc_endpoint.s3.id
}

output "egress" {
  description = "What the deployment pays for while idle: the NAT gateways and interface endpoints (per AZ) it runs."
  value = {
    mode                = var.egress
    nat_gateways        = local.nat
    interface_endpoints = sort(tolist(local.interface_endpoints))
    endpoint_azs        = length(local.interface_endpoints) > 0 ? 2 : 0
  }
}
