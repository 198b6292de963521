"""Service Quotas in the twin: the EC2 vCPU quotas a GPU start needs (moto answers only VPC's)."""
