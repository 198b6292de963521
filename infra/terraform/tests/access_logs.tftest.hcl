# ALB access logs: off by default (no bucket, nothing logged); on, a bucket of their own that only
# Elastic Load Balancing may write to (the region's ELB account where AWS documents one, the log
# delivery service principal elsewhere), SSE-S3, public access blocked, TLS only, kept 90 days.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

variables {
  name       = "self-hosted-llm-poc"
  vpc_id     = "vpc-0123456789abcdef0"
  vpc_cidr   = "10.0.0.0/16"
  subnet_ids = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
  region     = "us-east-1"
}

run "off_by_default_in_the_deployment" {
  command = plan

  assert {
    condition     = output.alb_access_logs_bucket == null
    error_message = "access logs must be off unless alb_access_logs is set"
  }
}

run "off_the_module_makes_no_bucket" {
  command = plan
  module {
    source = "./modules/alb"
  }

  assert {
    condition     = length(aws_s3_bucket.access_logs) == 0 && length(aws_s3_bucket_policy.access_logs) == 0
    error_message = "no log bucket when access logs are off"
  }
  assert {
    condition     = length(aws_lb.this.access_logs) == 0
    error_message = "the ALB must not log when access logs are off"
  }
}

run "on_in_a_region_with_an_elb_account" {
  command = plan
  module {
    source = "./modules/alb"
  }
  variables {
    access_logs = true
  }

  assert {
    condition     = aws_s3_bucket.access_logs[0].bucket == "self-hosted-llm-poc-alb-logs-123456789012"
    error_message = "bucket ${aws_s3_bucket.access_logs[0].bucket}"
  }
  assert {
    condition     = aws_lb.this.access_logs[0].enabled
    error_message = "the ALB must log to the bucket"
  }
  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.access_logs[0].rule).apply_server_side_encryption_by_default).sse_algorithm == "AES256"
    error_message = "ELB log delivery supports SSE-S3 (AES256) only"
  }
  assert {
    condition = alltrue([
      aws_s3_bucket_public_access_block.access_logs[0].block_public_acls,
      aws_s3_bucket_public_access_block.access_logs[0].block_public_policy,
      aws_s3_bucket_public_access_block.access_logs[0].ignore_public_acls,
      aws_s3_bucket_public_access_block.access_logs[0].restrict_public_buckets,
    ])
    error_message = "public access must be blocked four ways"
  }
  assert {
    condition     = jsondecode(aws_s3_bucket_policy.access_logs[0].policy).Statement[0].Principal == { AWS = "arn:aws:iam::127311923021:root" }
    error_message = "in us-east-1 the region's ELB account delivers: ${aws_s3_bucket_policy.access_logs[0].policy}"
  }
  assert {
    condition = (jsondecode(aws_s3_bucket_policy.access_logs[0].policy).Statement[0].Action == "s3:PutObject"
    && jsondecode(aws_s3_bucket_policy.access_logs[0].policy).Statement[0].Resource == "arn:aws:s3:::self-hosted-llm-poc-alb-logs-123456789012/AWSLogs/123456789012/*")
    error_message = "ELB may only put objects under AWSLogs/<this account>/"
  }
  assert {
    condition     = jsondecode(aws_s3_bucket_policy.access_logs[0].policy).Statement[1].Condition == { Bool = { "aws:SecureTransport" = "false" } }
    error_message = "requests without TLS must be denied"
  }
  assert {
    condition     = one(aws_s3_bucket_lifecycle_configuration.access_logs[0].rule).expiration[0].days == 90
    error_message = "access logs expire after 90 days"
  }
}

run "on_in_a_region_opened_after_august_2022" {
  command = plan
  module {
    source = "./modules/alb"
  }
  variables {
    access_logs = true
    region      = "ap-southeast-5"
  }

  assert {
    condition     = jsondecode(aws_s3_bucket_policy.access_logs[0].policy).Statement[0].Principal == { Service = "logdelivery.elasticloadbalancing.amazonaws.com" }
    error_message = "newer regions deliver through the log delivery service principal: ${aws_s3_bucket_policy.access_logs[0].policy}"
  }
}

run "on_in_the_deployment" {
  command = plan
  variables {
    alb_access_logs = true
  }

  assert {
    condition     = output.alb_access_logs_bucket != null
    error_message = "alb_access_logs = true must make the log bucket"
  }
}
