# Pinned versions. No .terraform.lock.hcl is committed: it can only be produced by `terraform init`
# (no terraform binary runs where this was written); run `terraform init` once and commit the lock.
terraform {
  # 1.9+ is needed for variable validations that refer to other variables.
  required_version = ">= 1.11.0, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.100.0, < 7.0.0"
    }
  }
}
