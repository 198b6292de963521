# Pinned versions. No .terraform.lock.hcl is committed: it can only be produced by `terraform init`
# (no terraform binary runs where this was written); run `terraform init` once and commit the lock.
terraform {
  # 1.9+ is needed for variable validations that refer to other variables.
  required_version = "~> 1.13.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "= 6.19.0"
    }
  }
}
