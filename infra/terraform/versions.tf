# Version constraints: what the tests run (Terraform 1.11, provider 5.100) and the current releases
# (Terraform 1.x, provider 6.x). .terraform.lock.hcl pins the provider version init installs.
terraform {
  # Validations that refer to other variables need 1.9; terraform test's override_during, 1.11.
  required_version = ">= 1.11.0, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.100.0, < 7.0.0"
    }
  }
}
