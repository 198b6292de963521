# Optional access logs (var.access_logs, off by default): a bucket of their own, as AWS's "Enable
# access logs for your Application Load Balancer" requires: in the ALB's region, encrypted with
# SSE-S3 (the only server-side encryption ELB log delivery supports), a bucket policy letting
# Elastic Load Balancing put objects under AWSLogs/<account>/. Who delivers depends on the region:
# in regions available before August 2022 the region's Elastic Load Balancing account, in later
# ones the log delivery service principal.

locals {
  # AWS's list of regions whose ELB access logs are delivered by a regional ELB account.
  elb_account_regions = [
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "af-south-1", "ap-east-1", "ap-south-1",
    "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-southeast-1", "ap-southeast-2",
    "ap-southeast-3", "ca-central-1", "eu-central-1", "eu-west-1", "eu-west-2", "eu-west-3",
    "eu-south-1", "eu-north-1", "me-south-1", "sa-east-1", "us-gov-west-1", "us-gov-east-1",
  ]
  elb_account_delivers = contains(local.elb_account_regions, var.region)
}

data "aws_caller_identity" "current" {
  count = var.access_logs ? 1 : 0
}

data "aws_elb_service_account" "this" {
  count  = var.access_logs && local.elb_account_delivers ? 1 : 0
  region = var.region
}

resource "aws_s3_bucket" "access_logs" {
  #checkov:skip=CKV_AWS_144:Access logs are a cost trace, not a record to keep through a region's loss; no replica.
  #checkov:skip=CKV_AWS_145:ELB access log delivery supports SSE-S3 only (AWS: "Enable access logs for your Application Load Balancer").
  #checkov:skip=CKV_AWS_18:This is the log bucket; logging it would need another bucket.
  #checkov:skip=CKV2_AWS_62:Nothing reacts to new log objects; `servingctl costs simulate` reads them on demand.
  count  = var.access_logs ? 1 : 0
  bucket = "${lower(var.name)}-alb-logs-${data.aws_caller_identity.current[0].account_id}"
}

resource "aws_s3_bucket_public_access_block" "access_logs" {
  count                   = var.access_logs ? 1 : 0
  bucket                  = aws_s3_bucket.access_logs[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "access_logs" {
  count  = var.access_logs ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  rule {
    object_ownership = "BucketOwnerEnforced" # ACLs off: the bucket owner owns every delivered object
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "access_logs" {
  count  = var.access_logs ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_versioning" "access_logs" {
  count  = var.access_logs ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "access_logs" {
  count  = var.access_logs ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  rule {
    id     = "expire"
    status = "Enabled"
    filter {}
    expiration {
      days = 90 # three months of traffic to replay; older logs are deleted
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

resource "aws_s3_bucket_policy" "access_logs" {
  count  = var.access_logs ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  # Written out (not a policy document data source) so `terraform test` can read what it grants.
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "ElbLogDelivery"
        Effect   = "Allow"
        Action   = "s3:PutObject"
        Resource = "${aws_s3_bucket.access_logs[0].arn}/AWSLogs/${data.aws_caller_identity.current[0].account_id}/*"
        Principal = (local.elb_account_delivers
          ? { AWS = one(data.aws_elb_service_account.this[*].arn) }
          : { Service = "logdelivery.elasticloadbalancing.amazonaws.com" }
        )
      },
      {
        Sid       = "TlsOnly"
        Effect    = "Deny"
        Action    = "s3:*"
        Principal = "*"
        Resource  = [aws_s3_bucket.access_logs[0].arn, "${aws_s3_bucket.access_logs[0].arn}/*"]
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      },
    ]
  })
  depends_on = [aws_s3_bucket_public_access_block.access_logs]
}
