provider "aws" {
  region = var.region

  # Every resource carries these tags; the controller's IAM conditions may key on servingctl:managed.
  default_tags {
    tags = {
      "servingctl:managed" = "true"
      "servingctl:stack"   = var.name
    }
  }
}
